"""Command line: parse, call the library, print. User mistakes: one line on stderr, exit 2."""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import sys
import traceback
from collections.abc import Iterator
from typing import Any, TextIO

from tune_batch.errors import NothingRecorded, SearchInterrupted, UserError

EXIT_USER = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, as for every user mistake
        self.exit(EXIT_USER, f"{self.prog}: error: {message}\n")


def _add_config(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help="YAML config file")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value, e.g. --set budget.trials=8 (YAML-typed; repeatable)")


def _common() -> argparse.ArgumentParser:
    """Flags every command takes, before or after its name (``tune-batch --debug search ...``
    and ``tune-batch search ... --debug`` alike)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks for errors")
    return common


def _version() -> str:
    """The installed distribution's version (the package's own __init__ sits above the CLI)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tune-batch")
    except PackageNotFoundError:
        return "(not installed: run from a source tree)"


def build_parser() -> argparse.ArgumentParser:
    common = _common()
    parser = _Parser(prog="tune-batch", description="Search batch size, learning rate and GPU count together.",
                     parents=[common])
    parser.add_argument("--version", action="version", version=f"tune-batch {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    s = sub.add_parser("search", help="run a search and print the Pareto front", parents=[common])
    _add_config(s)
    s.add_argument("--output", "-o",
                   help="run directory (default runs/<name>-<timestamp>); an existing one is continued")
    s.add_argument("--address", help="Ray cluster address ('auto' or ray://host:port); default: a local Ray instance")
    s.add_argument("--storage", help="Optuna storage URL to add the trials to (default: RUN_DIR/study.db)")
    s.add_argument("--study-name", help="Optuna study name (default: the config's name)")
    s.add_argument("--log-to", action="append", choices=["mlflow"], default=None,
                   help="also send the records, front and recommendation to this tracker (search.log_to)")
    s.add_argument("--force", action="store_true", help="continue a run directory even though its config differs")
    s.add_argument("--prefer", help="recommend the front point best in one objective (samples_per_s), or by weights "
                                    "(samples_per_s=2,val_acc=1); with confirmation: time_to_target (wall, the "
                                    "default) or device_seconds_to_target (wall x num_gpus)")
    g = s.add_mutually_exclusive_group()
    g.add_argument("--quiet", "-q", action="store_true", help="print only errors and the final table")
    g.add_argument("--verbose", "-v", action="store_true", help="show Ray's own logs and tables")

    v = sub.add_parser("validate", help="check a config (with --set overrides) without training: the model "
                       "and data load as a search's would (data.download fetches CIFAR-10)", parents=[common])
    _add_config(v)

    m = sub.add_parser("max-batch",
                       help="the largest batch size that fits under resources.device_memory, in few probes",
                       parents=[common])
    _add_config(m)

    pr = sub.add_parser("probe", help="one measured trial with the full measurement report and a profiler trace",
                        parents=[common])
    _add_config(pr)
    pr.add_argument("--batch-size", type=int, required=True)
    pr.add_argument("--lr", type=float, required=True)
    pr.add_argument("--num-gpus", type=int, default=1)
    pr.add_argument("--output", "-o",
                    help="run directory for the record and the trace (default runs/<name>-probe-<timestamp>)")

    e = sub.add_parser("export", help="print the recommendation in a trainer's own terms", parents=[common])
    e.add_argument("run_dir")
    e.add_argument("--to", required=True, choices=["lightning", "transformers", "keras"], help="the trainer")
    e.add_argument("--json", action="store_true", help="print the keyword arguments as JSON")

    r = sub.add_parser("report", help="rebuild the reports of a run directory from trials.jsonl", parents=[common])
    r.add_argument("run_dir")
    r.add_argument("--prefer", help="as for search: an objective name or weights, or with confirmation runs "
                                    "time_to_target (the default there) or device_seconds_to_target; without them "
                                    "the default is the front's knee")
    return parser


def _cmd_validate(args: argparse.Namespace) -> int:
    from tune_batch.config import load_config
    from tune_batch.config.advice import config_notes
    from tune_batch.pipeline.preflight import local_notes, preflight

    cfg = load_config(args.config, args.overrides)
    warned: list[str] = []
    preflight(cfg, warn=warned.append)  # the checks a search makes before it writes anything: model, data, batches
    warned += local_notes(cfg)  # and what a search here would say of this machine's resources
    print(f"{args.config}: valid ({cfg.name}: {len(cfg.space.batch_choices())} batch sizes x lr "
          f"[{cfg.space.lr.low:g}, {cfg.space.lr.high:g}] x num_gpus {cfg.space.num_gpus}; "
          f"{cfg.budget.trials} trials of {cfg.budget.train_samples} samples; "
          f"objectives {', '.join(cfg.metric_names)})")
    for note in [*warned, *config_notes(cfg)]:
        print(f"note: {note}")
    return 0


def _cmd_search(args: argparse.Namespace) -> int:
    from tune_batch.analysis.pareto import parse_prefer
    from tune_batch.config import load_config
    from tune_batch.pipeline.search import search

    trackers = [f"search.log_to=[{','.join(dict.fromkeys(args.log_to))}]"] if args.log_to else []
    cfg = load_config(args.config, [*args.overrides, *trackers])
    prefer = parse_prefer(args.prefer, cfg.metric_names)
    search(cfg, args.output, address=args.address, storage_url=args.storage, study_name=args.study_name,
           force=args.force, quiet=args.quiet, verbose=args.verbose, prefer=prefer)
    return 0


def _cmd_max_batch(args: argparse.Namespace) -> int:
    from tune_batch.config import load_config
    from tune_batch.pipeline.max_batch import max_batch, render

    cfg = load_config(args.config, args.overrides)
    result = max_batch(cfg)  # one worker
    print(render(result))
    return 0 if result.batch_size is not None else 1


def _cmd_probe(args: argparse.Namespace) -> int:
    from tune_batch.config import load_config
    from tune_batch.config.yamlio import overridden
    from tune_batch.output.probe import render_probe
    from tune_batch.pipeline.probe import probe

    cfg = load_config(args.config, args.overrides)
    # a probe profiles, whatever the config file says, unless this command line says otherwise
    profile = None if overridden(args.overrides, "profile.enabled") else True
    done = probe(cfg, args.batch_size, args.lr, args.num_gpus, args.output, profile=profile,
                 on_workload=lambda workload: print(f"workload: {workload}"))
    print(render_probe(done.result, done.trace_steps))
    print(f"record: {done.trials_path}")
    return 0 if done.ok else 1


def _cmd_report(args: argparse.Namespace) -> int:
    from tune_batch.analysis.pareto import parse_prefer
    from tune_batch.decide.recommend import decide
    from tune_batch.output.files import write_files
    from tune_batch.output.text import render_summary
    from tune_batch.pipeline.stages import unfinished
    from tune_batch.store.rundir import RunDir

    run = RunDir(args.run_dir)
    if not run.exists():
        raise UserError(f"run_dir {args.run_dir!r}: no config.yaml there; give a directory written by "
                        "'tune-batch search'")
    cfg = run.load_config()
    records, warnings = run.records()
    report = decide(cfg, records, warnings, prefer=parse_prefer(args.prefer, cfg.metric_names),
                    search_wall_s=run.search_wall_s())
    paths = write_files(report, run.path)
    print(render_summary(report))
    left = unfinished(cfg, records)
    if left:
        print(f"note: {left}")
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    from tune_batch.export import render, render_json

    if not args.json:
        print(render(args.to, args.run_dir))
        return 0
    text, note = render_json(args.to, args.run_dir)
    if note:
        print(f"tune-batch: {note}", file=sys.stderr)
    print(text)
    return 0


#: A write's errors that mean the reader is gone: a closed pipe (``search ... | head``) and a
#: terminal that hung up (EIO: the ssh connection dropped, the window closed).
READER_GONE = (errno.EPIPE, errno.EIO)


class _ReaderMayGo:
    """stdout (or stderr) that outlives its reader: once the pipe is closed (``search ... | head``)
    or the terminal hung up, what is printed is dropped, said once on stderr where that is still
    read, and the command goes on to its end (a search keeps training and writes its run
    directory; before, the next progress line raised BrokenPipeError in the middle of the
    search)."""

    def __init__(self, stream: TextIO, say: bool) -> None:
        self._stream, self._gone, self._say = stream, False, say

    def write(self, text: str) -> int:
        if not self._gone:
            with self._reader_may_go():
                return self._stream.write(text)
        return len(text)

    def flush(self) -> None:
        if not self._gone:
            with self._reader_may_go():
                self._stream.flush()

    @contextlib.contextmanager
    def _reader_may_go(self) -> Iterator[None]:
        """A write whose reader is gone (``READER_GONE``) drops the stream; other errors rise."""
        try:
            yield
        except OSError as e:
            if e.errno not in READER_GONE:
                raise
            self._lost()

    def _lost(self) -> None:
        self._gone = True
        with contextlib.suppress(OSError, ValueError):  # the buffer left behind flushes into nothing at exit
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, self._stream.fileno())
            os.close(null)
        if self._say:  # a search goes on for a while: say why nothing more shows
            with contextlib.suppress(OSError):  # stderr can be gone too (the terminal hung up)
                print("tune-batch: stdout was closed (its reader ended); going on without printing: the run "
                      "directory gets everything", file=sys.stderr, flush=True)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    stdout, stderr = sys.stdout, sys.stderr
    sys.stdout = _ReaderMayGo(stdout, say=args.command == "search")  # type: ignore[assignment]
    sys.stderr = _ReaderMayGo(stderr, say=False)  # type: ignore[assignment]
    try:
        return _run(args)
    finally:
        sys.stdout, sys.stderr = stdout, stderr


def _run(args: argparse.Namespace) -> int:
    debug = bool(getattr(args, "debug", False))
    commands = {"search": _cmd_search, "validate": _cmd_validate, "report": _cmd_report, "max-batch": _cmd_max_batch,
                "probe": _cmd_probe, "export": _cmd_export}
    from tune_batch.backends.signals import exit_code, received, said, stops_as_ctrl_c

    received["signal"] = None
    try:
        with stops_as_ctrl_c():  # a SIGTERM or SIGHUP before a search's own handlers (loading data): as Ctrl-C
            return commands[args.command](args)
    except UserError as e:
        if debug:
            traceback.print_exc()
        print(f"tune-batch: error: {e}", file=sys.stderr)
        return EXIT_USER
    except SearchInterrupted as e:
        print(f"tune-batch: {e}", file=sys.stderr)
        return exit_code(e.signal_number)
    except KeyboardInterrupt as e:
        kept = ("; nothing was recorded" if isinstance(e, NothingRecorded) or args.command == "probe" else
                "; finished trials are kept in the run directory (run the same command again to continue)"
                if args.command == "search" else "")
        print(f"tune-batch: interrupted{said(received['signal'])}{kept}", file=sys.stderr)
        return exit_code(received["signal"])


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
