"""Runs roots in object storage (``s3://bucket/prefix``), read through a local mirror.

Every reader in ``loaders`` works on folders. A runs root in a bucket is therefore read
into a *mirror*: a folder under the user's cache (``$MFM_REMOTE_DIR``, else
``~/.cache/mfm/remote/<hash of the URL>/``) laid out as the bucket is, filled lazily:

- **listing** a root (:func:`loaders.remote.listing.mirror_root`) reads each folder's
  manifest (``mfm.objectstore.ROOT_MANIFEST``: one GET for the ``run.json`` and
  ``lives.jsonl`` of every closed run in it), and lists the bucket (one delimiter listing per
  folder level, as :func:`loaders.run.find_runs` walks a disk, fetching each run's
  ``run.json`` and ``lives.jsonl``) where there is no manifest or its last check against a
  listing is too old. Never a whole run.
- **opening** a run (:func:`loaders.remote.sync.sync_run`, when a run is read) lists its
  folder and reads its columnar copy (``loaders.columns``) for every table whose size and
  ETag are those it was made from; other tables, ``logs.txt`` and ``mine/`` are fetched, each
  file again only when its size or ETag changed; a lazy table
  (``mfm.run_reader.LAZY_TABLES``) only when it is asked for
  (:func:`loaders.remote.sync.fetch_lazy`).
- **frames and episode records** (:class:`loaders.remote.source.RemoteSource`): an episode
  folder (records, frame strips, observation) is fetched the first time a page asks for one
  of its frames or records, or of a packed run the members asked for, by range
  (:mod:`loaders.remote.packs`); neighbouring strips are prefetched
  (:mod:`loaders.remote.prefetch`).
- **file checks** (:mod:`loaders.remote.file_checks`) are made against one listing of
  ``episodes/`` instead of stat'ing files; ``mfm validate`` of a run in a bucket is
  :mod:`loaders.remote.validate`.
- **write-back**: a closed run without a usable columnar copy has one written into the
  bucket from the files fetched (:mod:`loaders.remote.write_back`).

A run's files are looked at again at most every ``TTL`` seconds, so a live run in the bucket
moves on in the dashboard; the root's listing every ``ROOT_TTL`` seconds
(:mod:`loaders.remote.mirror`, which also keeps the mirror's marks and says which run a
folder is). A mirror is derived data: deleting it loses nothing. Object keys are checked
before they become local paths (no ``..``, no absolute or empty segments): a hostile bucket
cannot make the mirror write outside its folder.

What a listing offers is settled before anything is fetched
(:func:`loaders.remote.downloads.settle`): an object larger than its kind's bound
(``mfm.objectstore.OBJECT_LIMITS``, by the listing's size) is not downloaded, and a key that
is both an object and a folder of objects keeps one side; each is one problem of the run
naming the key, and the rest of the run is read. A download goes to a ``.NAME.PID.part``
file beside its place, removed whatever happens; those left by a process that died are
removed when a process first brings the run up to date.

The modules, top to bottom (``.importlinter``, contract ``remote-layers``): ``validate``;
``source``; ``write_back``; ``file_checks``; ``sync``; ``listing`` | ``packs`` |
``prefetch``; ``downloads``; ``mirror``. This package module imports none of them: import
the one whose names you use.
"""
