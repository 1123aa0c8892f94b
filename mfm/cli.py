"""The ``mfm`` command line: validate runs, start the dashboard, run the agent.

The core install runs ``run``, ``sweep``, ``validate`` and ``echo``; the subcommands that
read runs into tables or draw them import the loaders and the dashboard lazily, and say
which extra they need when it is not installed (:data:`EXTRAS`)."""
from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
from importlib.util import find_spec
from pathlib import Path
from typing import Any, Callable, NoReturn

from mfm.agent.config import ABLATIONS, METHODS, PERCEPTIONS, POLICIES
from mfm import progress
from mfm.objectstore import is_url
from mfm.envs.rules import task_names

EXTRAS = {"read": ("pandas", "duckdb", "pyarrow"),
          "dashboard": ("pandas", "duckdb", "pyarrow", "streamlit", "altair", "vl_convert"),
          "llm": ("openai",),
          "ray": ("ray",),
          "s3": ("s3fs",),
          "notebook": ("pandas", "duckdb", "pyarrow", "streamlit", "altair", "vl_convert", "jupyterlab", "ipykernel",
                       "anywidget", "ipywidgets", "nbclient", "nbformat", "nbconvert", "plotly")}
"""The modules (import names) each extra of pyproject.toml installs, with those of the extras it includes."""


def missing_extra(command: str, extra: str) -> bool:
    """True, after one line on stderr naming the extra, if a module of ``extra`` is not installed."""
    if all(find_spec(m) is not None for m in EXTRAS[extra]):
        return False
    print(f'mfm {command}: needs the {extra} extra: pip install "mfm[{extra}]"', file=sys.stderr)
    return True


def missing_store(command: str, *places: str | None) -> bool:
    """:func:`missing_extra` of the s3 extra when a place is a URL of object storage."""
    return any(p is not None and is_url(p) for p in places) and missing_extra(command, "s3")


def store_unusable(command: str, *places: str | None) -> bool:
    """True, after one line on stderr, if a place is a URL of object storage that cannot be
    used: the s3 extra missing (:func:`missing_store`), the bucket not there, the store not
    answering (:func:`mfm.objectstore.check_bucket`). Asked before any work is done."""
    if missing_store(command, *places):
        return True
    from mfm.objectstore import StoreError, check_bucket

    for place in places:
        if place is not None and is_url(place):
            try:
                check_bucket(place)
            except StoreError as e:
                print(f"mfm {command}: {e}", file=sys.stderr)
                return True
    return False


def cmd_validate(args: argparse.Namespace) -> int:
    """Print every problem of each run with file:line; exit 1 if any is an error. Large clean
    tables go through the fast path when the read extra is installed (the same output)."""
    if missing_store("validate", *args.runs):
        return 2
    try:
        from loaders.cachedread import validate
    except ImportError:
        from mfm.validate import validate

    worst = 0
    for run in args.runs:
        if is_url(run):
            if missing_extra("validate", "read"):
                return 2
            from loaders.remote.validate import validate_remote

            from mfm.objectstore import StoreError, check_bucket

            try:
                check_bucket(run)
                c = validate_remote(run, frames=args.frames)
            except (OSError, ValueError, StoreError) as e:
                print(f"mfm validate: {e}", file=sys.stderr)
                worst = 2
                continue
        elif not Path(run).is_dir():
            print(f"mfm validate: {run}: {'not a folder' if Path(run).exists() else 'no such folder'}",
                  file=sys.stderr)
            worst = 2
            continue
        else:
            c = validate(Path(run), frames=args.frames)
        errors = len(c.errors)
        warnings = len(c.problems) - errors
        for p in c.problems:
            print(f"{run}/{p}")
        counts = ", ".join(f"{len(v)} {k.split('.')[0]}" for k, v in c.tables.items() if v)
        verdict = "INVALID" if errors else "valid"
        print(f"{run}: {verdict}: {errors} error(s), {warnings} warning(s){'; ' + counts if counts else ''}")
        worst = max(worst, 1 if errors else 0)
    return worst


def cmd_pack(args: argparse.Namespace) -> int:
    """Pack (or ``--unpack``) each closed run's episodes into ``episodes.zip``; 1 if any run
    could not be."""
    from mfm.boundary import UnsafePath
    from mfm.memory.packed import PackError, pack_run, unpack_run

    from mfm.schema import read_manifest

    worst = 0
    for run in args.runs:
        path = Path(run)
        if not path.is_dir():
            print(f"mfm pack: {run}: {'not a folder' if path.exists() else 'no such folder'}", file=sys.stderr)
            worst = 2
            continue
        if not (path / "run.json").is_file():
            print(f"mfm pack: {run}: not a run directory (no run.json)", file=sys.stderr)
            worst = max(worst, 1)
            continue
        manifest, problems = read_manifest(path)
        if manifest is None:
            why = "; ".join(str(p) for p in problems[:1]) or "run.json: unreadable"
            print(f"mfm pack: {run}: {why}; not {'unpacked' if args.unpack else 'packed'}", file=sys.stderr)
            worst = max(worst, 1)
            continue
        before = _allocated(path)
        try:
            report = unpack_run(path) if args.unpack else pack_run(path)
        except (PackError, UnsafePath, OSError) as e:
            print(f"mfm pack: {run}: {e}", file=sys.stderr)
            worst = max(worst, 1)
            continue
        if report.done:
            fill_table_cache(path)
        done = ("unpacked" if args.unpack else "packed") if report.done else (
            "not packed, nothing to unpack" if args.unpack else "already packed, nothing to do")
        print(f"{run}: {done}; {report.files} episode files, {report.bytes / 1e6:.1f} MB; "
              f"on disk {before / 1e6:.1f} -> {_allocated(path) / 1e6:.1f} MB allocated")
    return worst


def _allocated(path: Path) -> int:
    """Bytes a folder's files and subfolders take on disk (allocated blocks)."""
    total = 0
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                pass
    return total


def cmd_dashboard(args: argparse.Namespace) -> int:
    """Start the Streamlit dashboard on a runs root, on ``--host`` (this machine only unless told
    otherwise), in a process group of its own that is stopped whole when this command is."""
    if store_unusable("dashboard", args.root):
        return 2
    if missing_extra("dashboard", "dashboard"):
        return 2
    app = Path(__file__).resolve().parent.parent / "dashboard" / "app.py"
    if not app.is_file():
        import dashboard

        app = Path(dashboard.__file__).resolve().parent / "app.py"
    if args.samples and args.root is not None:
        print("mfm dashboard: give a runs root or --samples, not both", file=sys.stderr)
        return 2
    if args.samples:
        root: Path | str = _sample_runs()
    elif args.root is None and not Path("sample_runs").is_dir():
        print("mfm dashboard: no runs root given and no sample_runs/ here: name a folder of runs "
              "(mfm dashboard RUNS_ROOT), or --samples to make the sample runs once and show them", file=sys.stderr)
        return 2
    else:
        root = args.root if is_url(args.root) else Path(args.root or "sample_runs").resolve()
    if is_url(root):
        from loaders.run import find_runs

        try:
            print(f"mfm dashboard: {root}: {len(find_runs(root))} runs listed")
        except (OSError, ValueError) as e:
            print(f"mfm dashboard: {e}", file=sys.stderr)
            return 2
    elif not root.is_dir():
        print(f"mfm dashboard: runs root {root} is not a folder", file=sys.stderr)
        return 2
    busy = _cannot_serve(args.host, args.port)
    if busy is not None:
        print(f"mfm dashboard: {busy}", file=sys.stderr)
        return 2
    cmd = [sys.executable, "-m", "dashboard.serve", *(["--no-warm"] if args.no_warm else []), str(app),
           "--server.port", str(args.port), "--server.address", args.host,
           "--server.headless", "true", "--browser.gatherUsageStats", "false",
           "--client.showErrorDetails", "type", "--", "--root", str(root)]
    env = dict(os.environ, MFM_RUNS_ROOT=str(root))
    from dashboard.serve import supervise

    return supervise(cmd, env)


def _sample_runs() -> Path:
    """The sample runs of this version in the user cache, played once (``mfm.samples``; the
    same bytes as the repository's sample_runs/) and kept there."""
    from mfm import __version__
    from mfm.objectstore import cache_root
    from mfm.samples import generate

    root = cache_root() / "samples" / __version__
    done = root / ".complete"
    if not done.is_file():
        root.mkdir(parents=True, exist_ok=True)
        print(f"mfm dashboard: making the sample runs in {root} (once)", file=sys.stderr)
        generate(root)
        done.write_text("the sample runs of mfm " + __version__ + "\n", encoding="utf-8")
    return root


def _cannot_serve(host: str, port: int) -> str | None:
    """Why the server could not listen on ``host``:``port`` (an unknown host, an address not
    of this machine, a port in use or not allowed), None when a socket binds there now."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as e:
        return f"--host {host}: not an address to serve on ({e.args[-1] if e.args else e})"
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as e:
            return f"cannot serve on {host} port {port}: {e.strerror or e}; choose another --port or --host"
    return None


def _checked(what: str, convert: Callable[[str], Any], accept: Callable[[Any], bool], rule: str
             ) -> Callable[[str], Any]:
    """An argparse type: ``convert(text)``, refused with one line when it is not ``what`` or when
    ``accept`` does not hold of it (``rule`` says why, with ``{value}`` and ``{text}``)."""
    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from None
        if not accept(value):
            raise argparse.ArgumentTypeError(rule.format(value=value, text=text))
        return value

    parse.__name__ = what
    return parse


def _at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: a whole number no smaller than ``minimum``."""
    return _checked("a whole number", int, lambda v: v >= minimum, f"must be at least {minimum}, not {{value}}")


_seconds = _checked("a number of seconds", float, lambda v: 0 < v < float("inf"),
                    "must be a positive number of seconds, not {text}")
_price = _checked("a price", float, lambda v: 0 <= v < float("inf"), "must be zero or more, not {text}")
_port = _checked("a port number", int, lambda v: 1 <= v <= 65535, "a port is 1-65535, not {value}")


def cmd_import(args: argparse.Namespace) -> int:
    """Convert a foreign run (or ours) into our run format, then validate what was written."""
    if store_unusable("import", args.src, args.dest):
        return 2
    if missing_extra("import", "read"):
        return 2
    from loaders.cachedread import validate
    from loaders.convert import import_runs
    from loaders.run import local_path

    dest = args.dest
    try:
        if is_url(dest):
            from mfm.objectstore import fresh_staging, is_empty

            if not is_empty(dest):
                raise ValueError(f"{dest} already holds files; choose another destination")
            stage = fresh_staging(dest)
            written = import_runs(local_path(args.src), stage)
        else:
            written = import_runs(local_path(args.src), Path(dest))
    except (ValueError, OSError) as e:
        print(f"mfm import: {e}", file=sys.stderr)
        return 2
    for d in written:
        c = validate(d)
        if is_url(dest):
            from mfm.objectstore import done_staging, join, upload_tree

            rel = d.relative_to(stage).as_posix()
            d = join(dest, rel) if rel != "." else dest
            try:
                upload_tree(stage / rel, d, make_copy=columnar_copy_maker())
            except OSError as e:
                print(f"mfm import: {d}: {e}; the converted run is kept in {stage / rel}", file=sys.stderr)
                return 1
        print(f"{d}: {len(c.tables['index.jsonl'])} episodes, {len(c.tables['steps.jsonl'])} steps; "
              f"{len(c.errors)} error(s), {len(c.problems) - len(c.errors)} warning(s)")
        source = (c.manifest.config.get("imported_from") or {}) if c.manifest else {}
        listed = source.get("problems") or []
        for p in listed:
            print(f"  left out of the source: {p}")
        if source.get("problem_count", 0) > len(listed):
            print(f"  ... {source['problem_count']} problems in the source in all")
    if is_url(dest):
        done_staging(stage)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """Run the memory-driven Crafter agent and write a run directory."""
    if store_unusable("run", args.out):
        return 2
    if args.policy == "llm" and missing_extra("run", "llm"):
        return 2
    from mfm.agent.config import RunConfig
    from mfm.agent.runner import Runner, command_line

    from mfm.agent.config import LLMConfig
    from mfm.agent.llm import LLMUnavailable
    from mfm.memory.appendlog import WriteError
    from mfm.memory.inheritance import InheritError, InheritFailed

    try:
        llm = None
        if args.policy == "llm":
            llm = LLMConfig(model=args.model or "", base_url=args.base_url, price_prompt_per_1k=args.price_in,
                            price_completion_per_1k=args.price_out, max_failures=args.max_failures,
                            timeout_s=args.timeout, send_images=not args.no_images)
        elif args.model:
            raise ValueError("--model needs --policy llm")
        config = RunConfig(task=args.task, method=args.method, seed=args.seed, steps=args.steps,
                           out=Path(args.out or "runs/run"), ablations=tuple(args.ablation or ()),
                           fixed_clock=args.fixed_clock, consolidate_every=args.consolidate_every, llm=llm,
                           perception=args.perception, area=args.area,
                           inherit=Path(args.inherit) if args.inherit else None)
    except ValueError as e:
        print(f"mfm run: {e}", file=sys.stderr)
        return 2
    out = args.out if is_url(args.out) else Path(args.out) if args.out else Path("runs") / config.run_name
    upload = None
    if isinstance(out, str):
        from mfm.objectstore import StoreError, Uploader, fresh_staging, is_empty

        try:
            if not is_empty(out):
                print(f"mfm run: {out} already holds files; choose another --out", file=sys.stderr)
                return 2
            upload = Uploader(fresh_staging(out), out, make_copy=columnar_copy_maker())
        except (StoreError, OSError) as e:
            print(f"mfm run: {e}", file=sys.stderr)
            return 2
    elif out.exists() and (not out.is_dir() or any(out.iterdir())):
        print(f"mfm run: {out} {'already holds files' if out.is_dir() else 'is a file'}: a run is never written "
              "over another; choose another --out", file=sys.stderr)
        return 2
    config = dataclasses.replace(config, out=upload.local if upload else out)
    argv = ["mfm", *sys.argv[1:]] if args.command_argv is None else args.command_argv
    try:
        runner = Runner(config, command=command_line(argv), progress=not args.quiet)
    except InheritFailed as e:
        print(f"mfm run: {e}", file=sys.stderr)
        return 1
    except (LLMUnavailable, InheritError) as e:
        print(f"mfm run: {e}", file=sys.stderr)
        return 2
    except WriteError as e:
        print(f"mfm run: {e.describe()}: the run could not start", file=sys.stderr)
        return 1
    failed: WriteError | None = None
    if upload is not None:
        upload.start()
    try:
        runner.run()
    except KeyboardInterrupt:
        pass
    except WriteError as e:
        failed = e
    if upload is not None:
        if upload.error:
            print(f"mfm run: an upload to {out} failed during the run and was tried again: {upload.error}",
                  file=sys.stderr)
        try:
            upload.close()
        except StoreError as e:
            print(f"mfm run: {e}; the whole run is kept in {upload.local} (upload it with "
                  f"mfm import {upload.local} {out})", file=sys.stderr)
            return 1
        from mfm.objectstore import done_staging

        done_staging(upload.local)
    m = runner.writer.manifest
    s = runner.summary()
    reached = [n for n in m.milestone_order if n in m.milestones]
    print(f"{out}: {m.status} ({m.end_reason}); {m.last_step} steps, {len(reached)}/{len(m.milestone_order)} milestones, "
          f"{s['deaths']} deaths, {s['turns']} turns ({s['steps_per_turn']} steps/turn); resources found by "
          f"inspection {sum(s['found_by_inspection'].values())}, by sight {sum(s['found_by_sight'].values())}")
    if config.llm is not None:
        print(f"model {s['model']}: {s['requests']} requests, {s['failures']} failures, {s['prompt_tokens']} prompt + "
              f"{s['completion_tokens']} completion tokens, cost ${s['cost_usd']:.4f}")
    if failed is not None:
        on_disk = runner.writer.status_on_disk
        closed = (f"run closed as crashed at step {s['steps']}" if on_disk == "crashed" else
                  f"stopped at step {s['steps']}, but run.json could not be updated (it still says {on_disk})")
        print(f"mfm run: {failed.describe()}: {closed}; earlier episodes are intact", file=sys.stderr)
        return 1
    if upload is None and m.status in ("finished", "interrupted"):
        fill_table_cache(out)
    return 0 if m.status == "finished" else 130


def columnar_copy_maker():
    """What makes a run's columnar copy when it closes into a bucket (``loaders.columns.build``,
    issue 48); None without the read extra (the bucket then holds the run's files only)."""
    try:
        from loaders.columns import build
    except ImportError:
        return None
    return build


def fill_table_cache(run_dir: Path) -> None:
    """Fill the loaders' table cache for a run just closed, so that its first open in the
    dashboard is a reopen (``loaders.cachedread.fill_closed_run``); nothing without the read extra."""
    try:
        from loaders.cachedread import fill_closed_run
    except ImportError:
        return
    try:
        fill_closed_run(run_dir)
    except KeyboardInterrupt:
        pass


def _csv(text: str) -> list[str]:
    return [v.strip() for v in text.split(",") if v.strip()]


def _screened(task: str, seeds: list[int], area: int | None = None) -> list[int]:
    """The seeds a reach task's screen keeps (:func:`mfm.envs.reach.screen`, with the iron
    :func:`mfm.envs.reach.iron_needed` asks for); each one dropped is printed with its reason,
    then the counts (all dropped, and those dropped for too little iron)."""
    from mfm.envs import load_task
    from mfm.envs.reach import iron_needed, screen

    spec = load_task(task)
    reach = spec.reach
    if reach is None:
        return seeds
    iron = iron_needed(reach, spec.kit)
    kept, for_iron = [], 0
    for seed in seeds:
        why = screen(seed, reach, (area, area), iron=iron) if area else screen(seed, reach, iron=iron)
        if why is None:
            kept.append(seed)
        else:
            for_iron += "iron cells reachable" in why
            print(f"mfm sweep: dropped seed {seed}: {why}", file=sys.stderr)
    print(f"mfm sweep: screen kept {len(kept)} of {len(seeds)} seeds ({len(seeds) - len(kept)} dropped, {for_iron} "
          f"of them for fewer than {iron} reachable iron cells)", file=sys.stderr)
    return kept


def cmd_sweep(args: argparse.Namespace) -> int:
    """Run every (method, seed) and (mfm + ablation, seed) not yet finished; 1 if any crashed."""
    if store_unusable("sweep", args.out):
        return 2
    from mfm.sweep import SweepBusy, plan, record_sweep, sweep_lock

    methods = _csv(args.methods)
    ablations = list(ABLATIONS) if args.ablations.strip() == "all" else _csv(args.ablations)
    bad = [m for m in methods if m not in METHODS] + [a for a in ablations if a not in ABLATIONS]
    if bad or (args.jobs is not None and args.jobs < 1):
        print(f"mfm sweep: unknown method/ablation {', '.join(bad)}" if bad else "mfm sweep: --jobs must be >= 1",
              file=sys.stderr)
        return 2
    try:
        seeds = [int(v) for v in _csv(args.seeds)]
    except ValueError:
        print(f"mfm sweep: seeds must be integers: {args.seeds}", file=sys.stderr)
        return 2
    if args.backend == "ray" and missing_extra("sweep", "ray"):
        return 2
    if args.address and args.backend != "ray":
        print("mfm sweep: --address needs --backend ray", file=sys.stderr)
        return 2
    if not methods and not ablations or not seeds:
        print(f"mfm sweep: no {'seeds' if not seeds else 'methods'} given (--seeds 0,1,2; --methods "
              f"{','.join(METHODS)})", file=sys.stderr)
        return 2
    from mfm.agent.config import RunConfig

    try:
        RunConfig(task=args.task, method=(methods or ["mfm"])[0], seed=seeds[0], steps=args.steps, area=args.area,
                  perception=args.perception or "map")
    except ValueError as e:
        print(f"mfm sweep: {e}", file=sys.stderr)
        return 2
    if not is_url(args.out) and Path(args.out).exists() and not Path(args.out).is_dir():
        print(f"mfm sweep: --out {args.out} is a file; name a folder of runs", file=sys.stderr)
        return 2
    if args.screen:
        seeds = _screened(args.task, seeds, args.area)
    out = args.out.rstrip("/") if is_url(args.out) else Path(args.out)
    jobs = plan(args.task, methods, seeds, out, args.steps, ablations=ablations, fixed_clock=args.fixed_clock,
                area=args.area, inherit=args.inherit,
                extra=("--perception", args.perception) if args.perception else ())
    for src in dict.fromkeys(j.inherit for j in jobs if j.inherit is not None):
        if is_url(src):
            continue
        from mfm.schema import read_manifest

        manifest, problems = read_manifest(Path(src)) if Path(src).is_dir() else (None, [])
        if manifest is None:
            what = ("; ".join(map(str, problems[:1])) or "no run there (no run.json)" if Path(src).is_dir() else
                    "not a folder" if Path(src).exists() else "no such folder")
            print(f"mfm sweep: --inherit {src}: {what}", file=sys.stderr)
            return 2
    command = " ".join(["mfm", *sys.argv[1:]])
    try:
        with sweep_lock(out, command):
            record_sweep(out, command, jobs)
            final = _sweep(jobs, args)
    except SweepBusy as e:
        print(f"mfm sweep: {e}", file=sys.stderr)
        return 2
    for name, status in final.items():
        print(f"{name}: {status}")
    return 1 if any(v.startswith("crashed") for v in final.values()) else 0


def _sweep(jobs: list, args: argparse.Namespace) -> dict[str, str]:
    """Run a sweep's jobs on the backend the arguments name."""
    from mfm.sweep import run_sweep

    if args.backend != "ray":
        return run_sweep(jobs, parallel=args.jobs or 2, retry=args.retry, timeout=args.timeout)
    from mfm.sweep_ray import RayBackend

    ray = RayBackend(args.address, num_cpus=args.jobs)
    try:
        return run_sweep(jobs, parallel=args.jobs or ray.cpus, retry=args.retry, timeout=args.timeout, backend=ray)
    finally:
        ray.close()


def cmd_methods(args: argparse.Namespace) -> int:
    """Print which method gets which memory affordance (the table of :mod:`mfm.agent.modes`)."""
    from mfm.agent.modes import table_text

    print(table_text(markdown=args.markdown))
    return 0


def cmd_results(args: argparse.Namespace) -> int:
    """Print the comparison tables (milestones, retargeting, interaction, retrieval reach)."""
    roots = [r for r in (args.root, args.against) if r]
    if any(store_unusable("results", root) for root in roots):
        return 2
    if missing_extra("results", "read"):
        return 2
    from loaders.compare import report

    for root in roots:
        if not is_url(root) and not Path(root).is_dir():
            print(f"mfm results: {root}: {'not a folder' if Path(root).exists() else 'no such folder'}",
                  file=sys.stderr)
            return 2
    where = (lambda root: root if is_url(root) else Path(root))
    try:
        text = report(where(args.root), task=args.task, against=where(args.against) if args.against else None)
    except LookupError as e:
        print(f"mfm results: {e}", file=sys.stderr)
        return 1
    if not text.strip():
        print(f"mfm results: no runs under {args.root}" + (f" of task {args.task}" if args.task else ""),
              file=sys.stderr)
        return 1
    print(text)
    return 0


def cmd_figures(args: argparse.Namespace) -> int:
    """Write the standard paper figures per task (SVG, PDF, PNG, their data as CSV and a JSON
    manifest each) and the paper's tables (LaTeX and CSV)."""
    if missing_store("figures", *args.paths):
        return 2
    if missing_extra("figures", "dashboard"):
        return 2
    from dashboard.figures import write_figures
    from loaders.escape import one_line

    notes: list[str] = []
    try:
        written = write_figures(args.paths, args.out, args.window, width=args.width, html_page=args.html,
                                command=" ".join(["mfm", *sys.argv[1:]]), notes=notes, height=args.height,
                                font_size=args.font_size, font=args.font)
    except ValueError as e:
        print(f"mfm figures: {one_line(e)}", file=sys.stderr)
        return 2
    print("\n".join(map(str, written)))
    for note in notes:
        print(f"mfm figures: {one_line(note)}", file=sys.stderr)
    return 0


def cmd_echo(args: argparse.Namespace) -> int:
    """Echo learner runs (``mfm echo run``) and their Success@0->k report (``mfm echo report``)."""
    from mfm.echo.agent import iter_configs, run_many
    from mfm.echo.measure import find_runs, summary_json, table
    from mfm.memory.appendlog import WriteError

    place = args.out if args.echo_command == "run" else args.root
    if is_url(place):
        print(f"mfm echo {args.echo_command}: Echo runs are local folders only (object storage is not supported "
              f"for them yet): {place}", file=sys.stderr)
        return 2
    if args.echo_command == "run":
        try:
            configs = list(iter_configs(args.configs))
        except ValueError as e:
            print(f"mfm echo run: {e}", file=sys.stderr)
            return 2
        try:
            seeds = [int(v) for v in _csv(args.seeds)]
        except ValueError:
            print(f"mfm echo run: --seeds must be comma-separated whole numbers, not {args.seeds!r}", file=sys.stderr)
            return 2
        if not seeds or not configs:
            print(f"mfm echo run: no {'seeds' if not seeds else 'configurations'} given", file=sys.stderr)
            return 2
        if Path(args.out).exists() and not Path(args.out).is_dir():
            print(f"mfm echo run: --out {args.out} is a file; name a folder of runs", file=sys.stderr)
            return 2
        if args.episodes < 1 or args.jobs < 1:
            print("mfm echo run: --episodes and --jobs must be at least 1", file=sys.stderr)
            return 2
        command = " ".join(["mfm", "echo", "run", "--configs", args.configs, "--seeds", args.seeds,
                            "--episodes", str(args.episodes)])
        try:
            results = run_many(configs, seeds, Path(args.out), episodes=args.episodes, step_cap=args.step_cap,
                               jobs=args.jobs, command=command)
        except ValueError as e:
            print(f"mfm echo run: {e}", file=sys.stderr)
            return 2
        except OSError as e:
            what = e.describe() if isinstance(e, WriteError) else e.strerror or str(e)
            print(f"mfm echo run: {what}; the run it stopped is closed as crashed if its run.json could still be "
                  f"written, finished runs are intact", file=sys.stderr)
            return 1
        for d, what in results:
            print(f"{d}: {what}")
        if not args.no_report:
            runs, _ = find_runs(Path(args.out))
            print()
            print(table(runs))
        return 1 if any(w.startswith("exists") for _, w in results) else 0
    root = Path(args.root)
    if not root.is_dir():
        print(f"mfm echo report: {root}: {'not a folder' if root.exists() else 'no such folder'}", file=sys.stderr)
        return 2
    runs, problems = find_runs(root)
    for d, p in problems:
        print(f"{d}/{p}", file=sys.stderr)
    if not runs:
        print(f"mfm echo report: no learner runs under {root}", file=sys.stderr)
        return 1
    print(summary_json(runs) if args.json else table(runs))
    return 0


DESCRIPTION = """mfm: run the memory-driven Crafter agent, check and convert run directories, print
result tables, write paper figures and start the dashboard. The core install runs run, sweep,
validate and echo; the commands that read runs into tables or draw them need an extra, and
say which one when it is missing."""

EXIT_CODES = """exit codes: 0 done, nothing wrong; 1 done, and problems found (an invalid run, a crashed
run of a sweep); 2 not done: a usage error or something missing in the environment (a
folder, an extra, a bucket), said in one line on stderr; 3 an error mfm did not expect (a bug:
one line names it, -v shows its traceback); 130 interrupted."""


class _Help(argparse.HelpFormatter):
    """Help that shows each option's default, unless its text already speaks of one or
    there is none worth showing."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        shown = action.default not in (None, "", argparse.SUPPRESS) and not isinstance(action.default, (bool, list))
        if not shown or "default" in text or not action.option_strings:
            return text
        return f"{text} (default: %(default)s)"


class _Parser(argparse.ArgumentParser):
    """Every parser of the command line, subcommands included, with :class:`_Help`."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", _Help)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def error(self, message: str) -> NoReturn:
        """A usage error in one line naming what is wrong and where help is (exit 2)."""
        self.exit(2, f"{self.prog}: {message} ({self.prog} --help shows the options)\n")


def build_parser() -> argparse.ArgumentParser:
    from mfm import __version__

    p = _Parser(prog="mfm", description=DESCRIPTION, epilog=EXIT_CODES)
    p.add_argument("--version", action="version", version=f"mfm {__version__}")
    p.add_argument("-v", "--verbose", action="count", default=0,
                   help="more messages (-vv: debugging ones); an unexpected error shows its traceback")
    p.add_argument("-q", "--quiet", action="count", default=0, dest="log_quiet", help="fewer messages: errors only")
    sub = p.add_subparsers(dest="command", required=True)

    v = sub.add_parser("validate", help="check run directories against the format spec")
    v.add_argument("runs", nargs="+", help="run directories")
    v.add_argument("--frames", action="store_true", help="also decode every frame strip")
    v.set_defaults(func=cmd_validate)

    i = sub.add_parser("import", help="convert an MFM export/run or a Crafter recording into our run format")
    i.add_argument("src", help="the run to read (folder, data.json export folder, or .npz/recorder folder)")
    i.add_argument("dest", help="a new folder to write")
    i.set_defaults(func=cmd_import)

    fg = sub.add_parser("figures", help="write the standard paper figures for runs or runs roots")
    fg.add_argument("paths", nargs="+", help="run directories or roots holding runs")
    fg.add_argument("--out", required=True, help="folder for the SVG/PDF/PNG files and their manifests")
    fg.add_argument("--window", type=_at_least(1), default=25, help="rolling window (turns) for steps per turn")
    fg.add_argument("--width", default=None,
                    help="every figure's whole width, and the width the tables are fitted to: single (a column, "
                         "3.45 in), double (a two-column page's text, 7 in), text (a one-column page's text, 5.5 in) "
                         "or a length such as 3.3in, 241pt (TeX points), 8.5cm; default: each figure's own, each "
                         "table a column if it fits one")
    fg.add_argument("--height", default=None,
                    help="every figure's whole height as a length (3in, 180pt); default: each figure's own aspect")
    fg.add_argument("--font-size", type=float, default=8.0,
                    help="type size in pt of titles, legends and notes (tick labels 1 pt smaller); default 8")
    fg.add_argument("--font", choices=("sans", "serif"), default="sans", help="typeface (DejaVu); default sans")
    fg.add_argument("--html", action="store_true", help="also write index.html showing every figure and table")
    fg.set_defaults(func=cmd_figures)

    pk = sub.add_parser("pack", help="pack a closed run's episode folders into one episodes.zip (storage, "
                                     "transfer), or unpack it; readers read either")
    pk.add_argument("runs", nargs="+", help="run directories (closed: finished, interrupted or crashed)")
    pk.add_argument("--unpack", action="store_true", help="put the episode folders back and remove the zip")
    pk.set_defaults(func=cmd_pack)

    d = sub.add_parser("dashboard", help="start the dashboard")
    d.add_argument("root", nargs="?", default=None,
                   help="runs root: a folder of runs or s3://bucket/prefix (default: sample_runs/ here)")
    d.add_argument("--samples", action="store_true",
                   help="show the sample runs: made once by playing them (python -m mfm.samples, about a minute "
                        "minutes) into the user cache, for an install without the repository's sample_runs/")
    d.add_argument("--port", type=_port, default=8501, help="the port to serve on (default: 8501)")
    d.add_argument("--host", default="127.0.0.1",
                   help="the address to serve on (default: 127.0.0.1, this machine only; 0.0.0.0 serves "
                        "every interface, so anyone who can reach this machine sees the runs)")
    d.add_argument("--no-warm", action="store_true",
                   help="do not visit the pages with the newest run open once the server has started "
                        "(those visits build its views before a browser asks for them)")
    d.set_defaults(func=cmd_dashboard)

    r = sub.add_parser("run", help="run the memory-driven Crafter agent")
    r.add_argument("--task", default="diamond", choices=task_names())
    r.add_argument("--method", default="mfm", choices=METHODS,
                   help="memory mode: which affordances the method gets (`mfm methods` prints the table)")
    r.add_argument("--ablation", action="append", choices=ABLATIONS,
                   help="switch a component of mfm off; no-budget (notes uncapped) also for any method with "
                        "notes (repeatable)")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--steps", type=_at_least(1), default=None, help="env step budget (default: the task's)")
    r.add_argument("--out", default=None, help="run directory (default: runs/TASK_METHOD_sSEED)")
    r.add_argument("--fixed-clock", action="store_true", help="deterministic timestamps (byte-identical runs)")
    r.add_argument("--consolidate-every", type=_at_least(1), default=25, help="episodes between consolidations")
    r.add_argument("--quiet", action="store_true", help="no progress line")
    r.add_argument("--policy", default="scripted", choices=POLICIES,
                   help="who decides: the scripted policy or a model (llm; see docs/llm.md)")
    r.add_argument("--model", default=None, help="model name for --policy llm (endpoint and key from "
                                                 "OPENAI_BASE_URL and OPENAI_API_KEY)")
    r.add_argument("--base-url", default=None, help="endpoint for --policy llm (default: $OPENAI_BASE_URL)")
    r.add_argument("--price-in", type=_price, default=0.0, help="USD per 1k prompt tokens (cost estimate)")
    r.add_argument("--price-out", type=_price, default=0.0, help="USD per 1k completion tokens (cost estimate)")
    r.add_argument("--max-failures", type=_at_least(1), default=5, help="model failures in a row that stop the run")
    r.add_argument("--timeout", type=_seconds, default=60.0, help="seconds per model request")
    r.add_argument("--no-images", action="store_true", help="do not send inspected frames as images")
    r.add_argument("--perception", default="map", choices=PERCEPTIONS,
                   help="where the live 9x7 view and daylight come from: the world map (default) or the "
                        "rendered frame, decoded (recorded in run.json as config.perception)")
    r.add_argument("--area", type=int, default=None,
                   help="the world's side in tiles (default: 64; run folders get _aN)")
    r.add_argument("--inherit", default=None, metavar="RUN",
                   help="start with the memory of RUN, a run that ended in the same world (a new game in a "
                        "known world: RUN is copied into the new run's inherited/; folders get _from-RUN)")
    r.set_defaults(func=cmd_run, command_argv=None)

    w = sub.add_parser("sweep", help="run methods x seeds (and mfm ablations) in parallel processes")
    w.add_argument("--task", default="diamond", choices=task_names())
    w.add_argument("--methods", default="direct,pro-long,vista,mfm", help="comma-separated methods")
    w.add_argument("--ablations", default="", help="comma-separated mfm ablations, each its own run per seed "
                                                   "('all' for every one); no-budget runs for every listed method "
                                                   "with notes")
    w.add_argument("--seeds", default="0,1,2", help="comma-separated seeds")
    w.add_argument("--jobs", type=_at_least(1), default=None, help="runs at a time (default: 2; with --backend "
                                                                     "ray, the cluster's CPUs)")
    w.add_argument("--steps", type=_at_least(1), default=None, help="env step budget (default: the task's)")
    w.add_argument("--out", required=True, help="folder of the runs (one sub-folder per run)")
    w.add_argument("--no-fixed-clock", dest="fixed_clock", action="store_false",
                   help="wall-clock timestamps instead of the deterministic clock")
    w.add_argument("--retry", action="store_true", help="set unfinished runs aside (OUT/.failed/) and run them again")
    w.add_argument("--timeout", type=_seconds, default=None,
                   help="kill a run after this many seconds (recorded as crashed)")
    w.add_argument("--backend", default="local", choices=("local", "ray"),
                   help="where the runs' processes run: here, or as Ray tasks (ray extra; docs/scale.md)")
    w.add_argument("--address", default=None, help="with --backend ray: the cluster to join ('auto': the one "
                                                   "started here by `ray start`); default: a local one for this sweep")
    w.add_argument("--area", type=int, default=None, help="the world's side in tiles (default: 64)")
    w.add_argument("--screen", action="store_true",
                   help="reach tasks: drop seeds whose world lacks a reachable target or tech tree, or holds too "
                        "little iron for the run's expected losses (mfm.envs.reach.screen), and say why")
    w.add_argument("--perception", default=None, choices=PERCEPTIONS,
                   help="where every run's live view comes from (mfm run --perception; default: map); the same "
                        "for every method of the sweep")
    w.add_argument("--inherit", default=None, metavar="RUN",
                   help="each run starts with the memory of RUN ({seed} is replaced by the run's seed), "
                        "e.g. runs/diamond_mfm_s{seed}; folders get _from-RUN")
    w.set_defaults(func=cmd_sweep)

    mt = sub.add_parser("methods", help="print which method gets which memory affordance")
    mt.add_argument("--markdown", action="store_true", help="as a Markdown table")
    mt.set_defaults(func=cmd_methods)

    t = sub.add_parser("results", help="print the comparison tables of the runs under a folder")
    t.add_argument("root", help="folder of runs (e.g. a sweep's --out)")
    t.add_argument("--task", default=None, help="only runs of this task")
    t.add_argument("--against", default=None, metavar="OTHER",
                   help="another folder of runs (the same sweep with another --perception, say): each method "
                        "here paired with itself there over the same seeds")
    t.set_defaults(func=cmd_results)

    e = sub.add_parser("echo", help="Echo learner (recipes learned from scratch): runs and the Success@0->k report")
    esub = e.add_subparsers(dest="echo_command", required=True)
    er = esub.add_parser("run", help="learner runs: configurations x seeds, in parallel processes")
    er.add_argument("--configs", default="all", help="comma-separated: passive, ical, ical-no-AXIS; or all")
    er.add_argument("--seeds", default="0,1,2", help="comma-separated seeds")
    er.add_argument("--episodes", type=_at_least(1), default=30, help="Echo episodes (attempts at a goal) per run")
    er.add_argument("--step-cap", type=_at_least(10), default=120, help="env steps allowed per Echo episode")
    er.add_argument("--jobs", type=_at_least(1), default=2, help="runs at a time")
    er.add_argument("--out", default="runs/echo", help="folder of the runs (one sub-folder per run)")
    er.add_argument("--no-report", action="store_true", help="do not print the table afterwards")
    ep = esub.add_parser("report", help="print Success@0->k per family, unlock curves and speed-up")
    ep.add_argument("root", help="folder holding learner runs")
    ep.add_argument("--json", action="store_true", help="the figures as JSON")
    e.set_defaults(func=cmd_echo)
    return p


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv``, set the log level from ``-v``/``-q``, run the subcommand; its exit code.

    An error no subcommand expected is one line naming it (exit 3); ``-v`` shows its traceback."""
    args = build_parser().parse_args(argv)
    level = logging.WARNING - 10 * args.verbose + 10 * args.log_quiet
    logging.basicConfig(level=min(max(level, logging.DEBUG), logging.CRITICAL), stream=sys.stderr,
                        format="mfm: %(levelname)s: %(name)s: %(message)s")
    name = args.command + (f" {args.echo_command}" if args.command == "echo" else "")
    try:
        with progress.command(name, enabled=not args.log_quiet):
            return args.func(args)
    except KeyboardInterrupt:
        print(f"mfm {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        if args.verbose:
            raise
        from mfm.objectstore import store_failure

        why = store_failure(e)
        if why is not None:
            print(f"mfm {name}: {why}", file=sys.stderr)
            return 2
        if isinstance(e, OSError) and e.strerror:
            where = f"{e.filename}: " if e.filename is not None else ""
            print(f"mfm {name}: {where}{e.strerror} (-v shows where)", file=sys.stderr)
            return 2
        print(f"mfm {args.command}: internal error: {type(e).__name__}: {e} (mfm -v {args.command} ... shows where; "
              "please report it)", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
