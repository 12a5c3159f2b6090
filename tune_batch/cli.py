"""Command line: parse, call the library, print. User mistakes: one line on stderr, exit 2."""

from __future__ import annotations

import argparse
import math
import signal
import sys
import traceback

from tune_batch.errors import SearchInterrupted, UserError
from tune_batch.records import Status, TrialResult

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


def build_parser() -> argparse.ArgumentParser:
    common = _common()
    parser = _Parser(prog="tune-batch", description="Search batch size, learning rate and GPU count together.",
                     parents=[common])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    s = sub.add_parser("search", help="run a search and print the Pareto front", parents=[common])
    _add_config(s)
    s.add_argument("--output", "-o", help="run directory (default runs/<name>-<timestamp>); an existing one is continued")
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

    v = sub.add_parser("validate", help="check a config (with --set overrides) without running anything",
                       parents=[common])
    _add_config(v)

    m = sub.add_parser("max-batch", help="the largest batch size that fits under resources.device_memory, in few probes",
                       parents=[common])
    _add_config(m)
    m.add_argument("--num-gpus", type=int, default=1, help="workers the batch is split over (default 1)")

    pr = sub.add_parser("probe", help="one measured trial with the full measurement report and a profiler trace",
                        parents=[common])
    _add_config(pr)
    pr.add_argument("--batch-size", type=int, required=True)
    pr.add_argument("--lr", type=float, required=True)
    pr.add_argument("--num-gpus", type=int, default=1)
    pr.add_argument("--output", "-o", help="run directory for the record and the trace (default runs/<name>-probe-<timestamp>)")

    e = sub.add_parser("export", help="print the recommendation in a trainer's own terms", parents=[common])
    e.add_argument("run_dir")
    e.add_argument("--to", required=True, choices=["lightning", "transformers", "keras"], help="the trainer")
    e.add_argument("--json", action="store_true", help="print the keyword arguments as JSON")

    r = sub.add_parser("report", help="rebuild the reports of a run directory from trials.jsonl", parents=[common])
    r.add_argument("run_dir")
    r.add_argument("--prefer", help="as for search: an objective name or weights; default: the knee")
    return parser


def _cmd_validate(args: argparse.Namespace) -> int:
    from tune_batch.config import load_config
    from tune_batch.runner import preflight

    cfg = load_config(args.config, args.overrides)
    preflight(cfg)  # the checks a search makes before it writes anything: model, data, batch sizes
    print(f"{args.config}: valid ({cfg.name}: {len(cfg.space.batch_choices())} batch sizes x lr "
          f"[{cfg.space.lr.low:g}, {cfg.space.lr.high:g}] x num_gpus {cfg.space.num_gpus}; "
          f"{cfg.budget.trials} trials of {cfg.budget.train_samples} samples; objectives {', '.join(cfg.metric_names)})")
    return 0


def _cmd_search(args: argparse.Namespace) -> int:
    from tune_batch.config import load_config
    from tune_batch.pareto import parse_prefer
    from tune_batch.runner import search

    trackers = [f"search.log_to=[{','.join(dict.fromkeys(args.log_to))}]"] if args.log_to else []
    cfg = load_config(args.config, [*args.overrides, *trackers])
    prefer = parse_prefer(args.prefer, cfg.metric_names)
    search(cfg, args.output, address=args.address, storage_url=args.storage, study_name=args.study_name,
           force=args.force, quiet=args.quiet, verbose=args.verbose, prefer=prefer)
    return 0


def _cmd_max_batch(args: argparse.Namespace) -> int:
    from tune_batch.config import load_config
    from tune_batch.max_batch import max_batch, render

    cfg = load_config(args.config, args.overrides)
    if args.num_gpus < 1 or args.num_gpus > 1:
        raise UserError(f"--num-gpus {args.num_gpus}: this version probes one worker; allowed: 1")
    result = max_batch(cfg, args.num_gpus)
    print(render(result, args.num_gpus))
    return 0 if result.batch_size is not None else 1


def _cmd_probe(args: argparse.Namespace) -> int:
    import time

    from tune_batch.config import load_config
    from tune_batch.results import RunDir
    from tune_batch.runner import preflight
    from tune_batch.trial import run_trial
    from tune_batch.yamlio import overridden

    cfg = load_config(args.config, args.overrides)
    if args.batch_size < 1 or not (math.isfinite(args.lr) and args.lr > 0) or args.num_gpus < 1:
        raise UserError(f"--batch-size {args.batch_size} --lr {args.lr} --num-gpus {args.num_gpus}: "
                        "need batch size >= 1, a finite lr > 0, num_gpus >= 1")
    # a probe profiles, whatever the config file says, unless this command line says otherwise
    if not overridden(args.overrides, "profile.enabled"):
        cfg = cfg.model_copy(update={"profile": cfg.profile.model_copy(update={"enabled": True})})
    out = RunDir(f"runs/{cfg.name}-probe-{time.strftime('%Y%m%d-%H%M%S')}" if args.output is None else args.output)
    RunDir.check_writable(out.path)
    print(f"workload: {preflight(cfg, batch_size=args.batch_size)}")
    with out.lock():
        searched = [r for r in out.records()[0] if r.trial_id != "probe"]
        if searched:
            raise UserError(f"--output {str(out.path)!r} holds a search ({len(searched)} trial record(s)): a probe there "
                            f"would rewrite its config.yaml and mix its records; give the probe its own --output")
        out.prepare(cfg, force=True)
        res = run_trial(cfg, {"batch_size": args.batch_size, "lr": args.lr, "num_gpus": args.num_gpus},
                        trial_id="probe", run_dir=out.path)
        out.append(res)
    print(render_probe(res))
    print(f"record: {out.trials_path}")
    return 0 if res.status == "ok" else 1


def _probe_window(res: TrialResult) -> str:
    m, info = res.metrics, res.info
    text = (f"timed window: {info.timed_steps} steps, {info.timed_samples} samples, {m.timed_s:.2f} s; "
            f"{info.warmup_steps} warm-up steps not timed")
    if info.window_extension_steps:
        text += (f"; {info.window_extension_steps} of the steps only lengthen the window to "
                 f"budget.min_window_s, the weights were restored after them")
    return text


def _probe_extras(res: TrialResult) -> list[str]:
    m, info = res.metrics, res.info
    lines = []
    if info.mfu_flag:
        lines.append(f"  warning           {info.mfu_flag}")
    if info.trace_dir and info.profile_step_s is not None:
        held = (f"{info.profile_active_steps} recorded in the trace, of {info.profiled_steps} run under the profiler "
                f"(wait and warm-up not recorded)" if info.profile_active_steps is not None
                and info.profile_active_steps != info.profiled_steps else f"{info.profiled_steps} profiled steps")
        lines.append(f"  trace             {info.trace_dir} ({held}, {info.profile_step_s * 1000:.2f} ms/step, "
                     f"{_overhead(res)})")
        lines += _trace_flag(res)
    elif info.profile:
        lines.append(f"  trace             {info.profile}")
    if m.energy_j_per_sample is not None:
        lines.insert(0, f"  energy            {m.energy_j_per_sample:.5f} J/sample   (NVML total-energy counter over "
                        f"the window; mean power {info.power_w or float('nan'):.0f} W)")
    return lines


def _overhead(res: TrialResult) -> str:
    """The profiler overhead, or why it is not a measurement: negative, or inside the window's
    own step-to-step noise (the 95 % half-width of samples/s)."""
    m, over = res.metrics, res.info.profiler_overhead
    noise = (m.samples_per_s_ci or 0.0) / m.samples_per_s if m.samples_per_s else 0.0
    if over is None:
        return "profiler overhead not measured"
    if over < 0:
        return (f"profiler overhead {over:+.1%}: UNVERIFIED, negative: the profiled steps ran faster than the "
                f"window, which is noise, not a speed-up")
    if over <= noise:
        return f"profiler overhead {over:+.1%}: UNVERIFIED, inside the window's own noise (+-{noise:.1%})"
    return f"profiler overhead {over:+.1%} (window noise +-{noise:.1%})"


def _trace_steps(trace_dir: str) -> int | None:
    """ProfilerStep events in the trace files of ``trace_dir`` (None when none can be read)."""
    import gzip
    import json as _json
    from pathlib import Path

    n, read = 0, False
    for f in Path(trace_dir).glob("*.pt.trace.json*"):
        try:
            with (gzip.open(f, "rt") if f.suffix == ".gz" else f.open()) as fh:
                events = _json.load(fh).get("traceEvents", [])
        except (OSError, ValueError):
            continue
        read = True
        n += sum(1 for e in events if str(e.get("name", "")).startswith("ProfilerStep#"))
    return n if read else None


def _trace_flag(res: TrialResult) -> list[str]:
    """A warning when the trace holds another number of profiled steps than this trial recorded
    (e.g. an earlier probe's traces in the same directory)."""
    info = res.info
    wanted = info.profile_active_steps
    found = _trace_steps(info.trace_dir) if info.trace_dir else None
    if found is None:
        return [f"  warning           no readable trace in {info.trace_dir}: the profiled steps are not shown there"]
    if wanted is not None and found != wanted:
        return [f"  warning           the trace holds {found} profiled step(s), this trial recorded {wanted}: "
                f"it is not this trial's alone (earlier traces in that directory?)"]
    return []


def render_probe(res: TrialResult) -> str:
    """The probe's full measurement report of one trial."""
    lines = [f"trial {res.trial_id}: {res.status.value}" + (f" ({res.reason})" if res.reason else "")]
    if res.status is not Status.OK:
        return "\n".join(lines)
    m, info, nan = res.metrics, res.info, float("nan")
    util_how = info.device_util_method or ("CPU time / (wall x threads)" if info.device_util_raw is not None else "")
    lines += [
        f"  device            {info.device}",
        f"  samples_per_s     {m.samples_per_s:.1f}   ({_probe_window(res)})",
        f"  step_time_s       {(m.step_time_s or nan) * 1000:.2f} ms",
        f"  device_util       {m.device_util if m.device_util is not None else nan:.3f}   ({util_how})",
        *([f"  sm_active         {info.sm_active:.3f}   (share of SMs busy over the window, NVML GPM; "
           f"tensor pipes busy {info.tensor_active if info.tensor_active is not None else nan:.3f})"]
          if info.sm_active is not None else []),
        f"  mfu               {m.mfu:.3f}   ({(m.model_flops_per_s or nan) / 1e9:.1f} GFLOP/s of "
        f"{(info.model_flops_per_sample or nan) / 1e9:.4f} GFLOP/sample; peak {(info.peak_flops_per_s or nan) / 1e9:.1f} "
        f"GFLOP/s, {info.peak_source})",
        f"  peak_mem_bytes    {(m.peak_mem_bytes or nan) / 2**20:.1f} MiB ({info.peak_mem_method or ''})",
        f"  data_wait_frac    {m.data_wait_frac:.3f}",
        f"  val_acc           {m.val_acc if m.val_acc is not None else nan:.4f}",
        f"  bottleneck        {info.bottleneck}: {info.suggestion}",
    ]
    return "\n".join(lines + _probe_extras(res))


def _cmd_report(args: argparse.Namespace) -> int:
    from tune_batch.decision import decide
    from tune_batch.files import write_files
    from tune_batch.pareto import parse_prefer
    from tune_batch.report import render_summary
    from tune_batch.results import RunDir

    run = RunDir(args.run_dir)
    if not run.exists():
        raise UserError(f"run_dir {args.run_dir!r}: no config.yaml there; give a directory written by 'tune-batch search'")
    cfg = run.load_config()
    records, warnings = run.records()
    report = decide(cfg, records, warnings, prefer=parse_prefer(args.prefer, cfg.metric_names),
                    search_wall_s=run.search_wall_s())
    paths = write_files(report, run.path)
    print(render_summary(report))
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


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    debug = bool(getattr(args, "debug", False))
    commands = {"search": _cmd_search, "validate": _cmd_validate, "report": _cmd_report, "max-batch": _cmd_max_batch,
                "probe": _cmd_probe, "export": _cmd_export}
    try:
        return commands[args.command](args)
    except UserError as e:
        if debug:
            traceback.print_exc()
        print(f"tune-batch: error: {e}", file=sys.stderr)
        return EXIT_USER
    except SearchInterrupted as e:
        print(f"tune-batch: {e}", file=sys.stderr)
        return 130 if e.signal_number != signal.SIGTERM else 143
    except KeyboardInterrupt:
        print("tune-batch: interrupted; finished trials are kept in the run directory "
              "(run the same command again to continue)", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
