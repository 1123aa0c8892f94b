"""mfm: Multimodal Filesystem Memory for long-horizon embodied agents."""
__version__ = "0.1.0"
