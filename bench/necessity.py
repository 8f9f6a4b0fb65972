"""Benchmark: the eSault paper's Fig. 7, why elasticity: the same load at fixed parallelism and elastic.

    python bench/necessity.py                    # ~7 minutes: 5 settings x (5 s + one 80 s cycle)
    python bench/necessity.py --quick            # ~1 minute smoke run (figures to a temp folder)
    python bench/necessity.py --settings 1,4,elastic --cycles 2

The workload and profile are bench/elastic.py's (bench/elastic_common.py); by
default one cycle per setting to keep the whole bench short. Each setting runs
in its own Python process, so memory (RSS) and threads do not carry over:
- fixed N: the counter has N SPUs (key space cut evenly), JobConfig(elasticity=False);
- elastic: the counter starts with 1 SPU, JobConfig(elasticity=True).
Per setting: mean, variance, p99 and max end-to-end latency over every tuple,
the spout's largest lag behind the profile, tuples still owed when the profile
ended, and RSS. Writes docs/figures/necessity.csv (per second, all settings),
docs/figures/necessity_summary.csv, docs/figures/necessity.png and the section
between <!-- bench:necessity:start --> and <!-- bench:necessity:end --> of
docs/ELASTICITY.md (--no-write to skip).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import elastic_common as ec
import numpy as np
from _report import write_section

SECTION = "necessity"
SUMMARY_FIELDS = ["setting", "n", "mean_ms", "var_ms2", "std_ms", "p50_ms", "p99_ms", "max_ms", "max_lag_s",
                  "unsent", "max_pending", "rss_start_mb", "rss_peak_mb", "rss_end_mb", "spus_min", "spus_max",
                  "splits", "merges", "failed", "cpu_mean_pct", "steal_mean_pct", "steal_max_pct", "wall_s"]


def parse_settings(text: str) -> list[str]:
    out = []
    for part in text.split(","):
        part = part.strip()
        if part != "elastic" and not (part.isdigit() and int(part) >= 1):
            raise SystemExit(f"--settings: {part!r} is neither a whole number >= 1 nor 'elastic'; e.g. 1,2,4,8,elastic")
        out.append(part)
    return out


# --- one setting (child process) -----------------------------------------------------

def run_one(setting: str, profile: ec.Profile, workload: ec.Workload, path: Path) -> None:
    elastic = setting == "elastic"
    result = ec.run_profile(setting, profile, workload, parallelism=1 if elastic else int(setting), elastic=elastic,
                            log=lambda line: print(line, flush=True))
    s = result.latency_summary()
    rows = result.rows
    rss = [r["rss_mb"] for r in rows]
    spus = [r["spus"] for r in rows]
    summary = {
        "setting": setting, **s, "std_ms": float(np.sqrt(s["var_ms2"])),
        "max_lag_s": max((r["lag_s"] for r in rows), default=0.0), "unsent": result.final["unsent"],
        "max_pending": max((r["pending_trees"] for r in rows), default=0),
        "rss_start_mb": rss[0], "rss_peak_mb": max(rss), "rss_end_mb": rss[-1],
        "spus_min": min(spus), "spus_max": max(spus),
        "splits": sum(1 for e in result.events if e.action == "split"),
        "merges": sum(1 for e in result.events if e.action == "merge"),
        "failed": result.final["failed"], "wall_s": result.wall_seconds,
        "cpu_mean_pct": float(np.mean([r["cpu_pct"] for r in rows])),
        "steal_mean_pct": float(np.mean([r["steal_pct"] for r in rows])),
        "steal_max_pct": max(r["steal_pct"] for r in rows),
    }
    path.write_text(json.dumps({
        "summary": summary, "rows": rows, "events": [ec.as_dict(e) for e in result.events],
        "final": result.final, "sampler_errors": result.sampler_errors,
    }))


def run_child(setting: str, argv: list[str], log: Any = print) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="esault-necessity-") as tmp:
        out = Path(tmp) / "result.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), *argv, "--one", setting, "--result", str(out)]
        proc = subprocess.run(cmd, text=True, capture_output=True, check=False)
        for line in proc.stdout.splitlines():
            if line.startswith("  ["):
                log(line)
        if proc.returncode != 0 or not out.exists():
            raise SystemExit(f"setting {setting} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
        if proc.stderr.strip():
            log(f"  [{setting}] stderr: {proc.stderr.strip().splitlines()[-1][:200]}")
        return json.loads(out.read_text())


# --- figure -------------------------------------------------------------------------

COLORS = {"1": "tab:red", "2": "tab:orange", "4": "tab:olive", "6": "tab:cyan", "8": "tab:blue",
          "10": "tab:brown", "elastic": "k"}


def label(setting: str) -> str:
    return "elastic" if setting == "elastic" else f"fixed {setting}"


def plot(results: dict[str, dict[str, Any]], profile: ec.Profile, workload: ec.Workload, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    (ax_lat, ax_lag), (ax_rss, ax_bar) = axes
    for ax in (ax_lat, ax_lag, ax_rss):
        ec.shade_phases(ax, profile)
        ax.grid(alpha=0.3)
        ax.set_xlabel("seconds since the job started")
    for setting, res in results.items():
        rows = res["rows"]
        t = np.array([r["t"] for r in rows]) - 0.5
        c = COLORS.get(setting)
        lw = 2.0 if setting == "elastic" else 1.2
        mean = np.array([np.nan if r["latency_mean_ms"] == "" else r["latency_mean_ms"] for r in rows], dtype=float)
        ax_lat.semilogy(t, mean, color=c, lw=lw, label=label(setting))
        ax_lag.plot(t, [r["lag_s"] for r in rows], color=c, lw=lw, label=label(setting))
        ax_rss.plot(t, [r["rss_mb"] for r in rows], color=c, lw=lw, label=label(setting))
    limit = workload.elasticity["max_latency"] * 1000
    ax_lat.axhline(limit, color="k", ls=":", lw=1, label=f"max_latency {limit:g} ms")
    ax_lat.set_ylabel("mean end-to-end latency per second, ms")
    ax_lat.set_title("latency inside the job (bounded by max_spout_pending)", fontsize=10)
    twin = ax_lat.twinx()
    seg_t = [s.start for s in profile.segments] + [profile.duration]
    seg_r = [s.rate for s in profile.segments] + [profile.segments[-1].rate]
    twin.step(seg_t, seg_r, where="post", color="0.5", ls="--", lw=1)
    twin.set_ylabel("offered tuples/s (dashed)", color="0.4")
    ax_lat.legend(loc="upper left", fontsize=8)
    ax_lag.set_ylabel("spout lag behind the profile, s")
    ax_lag.set_title("how far the source fell behind (the backlog outside the job)", fontsize=10)
    ax_lag.legend(loc="upper left", fontsize=8)
    ax_rss.set_ylabel("RSS, MB (one process per setting)")
    ax_rss.set_ylim(bottom=0)
    ax_rss.set_title("memory", fontsize=10)
    ax_rss.legend(loc="lower right", fontsize=8)

    names = list(results)
    x = np.arange(len(names))
    width = 0.26
    for i, (key, name) in enumerate((("mean_ms", "mean"), ("p99_ms", "p99"), ("max_ms", "max"))):
        vals = [results[s]["summary"][key] for s in names]
        ax_bar.bar(x + (i - 1) * width, vals, width, label=name)
    ax_bar.set_yscale("log")
    ax_bar.set_xticks(x, [label(s) for s in names])
    ax_bar.axhline(limit, color="k", ls=":", lw=1)
    ax_bar.set_ylabel("end-to-end latency over the run, ms")
    ax_bar.set_title("per setting", fontsize=10)
    ax_bar.legend(fontsize=8)
    ax_bar.grid(alpha=0.3, axis="y")
    fig.suptitle(f"esault necessity (paper Fig. 7, scaled): fixed parallelism vs elastic; counter lookup "
                 f"{workload.cost * 1000:g} ms/tuple; {ec.placement_text()}", fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --- report -------------------------------------------------------------------------

def table_markdown(results: dict[str, dict[str, Any]]) -> str:
    lines = [
        ("| setting | mean ms | variance ms² (std) | p99 ms | max ms | largest spout lag s | owed at the end | "
         "RSS start / peak / end MB | CPU % of a core (mean) | stolen % (mean / max) | SPUs |"),
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | :---: |",
    ]
    for s, res in results.items():
        m = res["summary"]
        spus = f"{m['spus_min']}-{m['spus_max']} ({m['splits']} splits, {m['merges']} merges)" \
            if s == "elastic" else str(m["spus_min"])
        lines.append(
            f"| {label(s)} | {m['mean_ms']:,.1f} | {m['var_ms2']:,.0f} ({m['std_ms']:,.0f}) | {m['p99_ms']:,.0f} | "
            f"{m['max_ms']:,.0f} | {m['max_lag_s']:.1f} | {m['unsent']:,} | {m['rss_start_mb']:.0f} / "
            f"{m['rss_peak_mb']:.0f} / {m['rss_end_mb']:.0f} | {m['cpu_mean_pct']:.0f} | "
            f"{m['steal_mean_pct']:.1f} / {m['steal_max_pct']:.1f} | {spus} |"
        )
    return "\n".join(lines)


def report(results: dict[str, dict[str, Any]], profile: ec.Profile, workload: ec.Workload, cmd: str,
           figure: str, wall: float) -> str:
    lines = [
        f"`{cmd}` on {ec.machine_line()}; whole bench {wall / 60:.1f} min, one process per setting.",
        "",
        f"- Profile (every setting): {profile.describe()}.",
        f"- Workload: {ec.workload_markdown(workload)}.",
        f"- Elastic setting: counter starts with 1 SPU; {ec.elasticity_markdown(workload)}.",
        "",
        f"![necessity run]({figure})",
        "",
        ("Latency is end to end (spout emit to the meter) over every tuple of the run; the spout's lag is how far "
         "it was behind the profile, i.e. how old the oldest input waiting outside the job was; 'owed at the end' "
         "is input the profile asked for that was never emitted."),
        "",
        table_markdown(results),
    ]
    elastic = results.get("elastic")
    if elastic is not None:
        events = [ec.ScalingEvent(**e) for e in elastic["events"]]
        lines += ["", "Pause moved keys saw in the elastic setting:", "", ec.pause_markdown(events)]
    for s, res in results.items():
        f = res["final"]
        if f["failed"] or not f["drained"] or res["sampler_errors"]:
            lines.append(f"\nNote ({label(s)}): failed {f['failed']}, drained {f['drained']}, "
                         f"sampler errors {len(res['sampler_errors'])}.")
    return "\n".join(lines)


def print_table(results: dict[str, dict[str, Any]]) -> None:
    print()
    print(f"{'setting':<9} {'mean ms':>9} {'var ms2':>12} {'p99 ms':>8} {'max ms':>8} {'lag s':>6} {'owed':>7} "
          f"{'RSS MB start/peak/end':>22} {'SPUs':>6}")
    for s, res in results.items():
        m = res["summary"]
        print(f"{label(s):<9} {m['mean_ms']:>9.1f} {m['var_ms2']:>12,.0f} {m['p99_ms']:>8.0f} {m['max_ms']:>8.0f} "
              f"{m['max_lag_s']:>6.1f} {m['unsent']:>7,} {m['rss_start_mb']:>8.0f}/{m['rss_peak_mb']:.0f}/"
              f"{m['rss_end_mb']:.0f} {m['spus_min']:>3}-{m['spus_max']}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ec.add_common_args(parser, cycle_seconds=80.0, cycles=1, quick_cycle=9.0, quick_cycles=1, quick_warmup=1.0)
    parser.add_argument("--settings", default="1,2,4,8,elastic",
                        help="comma-separated fixed SPU counts and/or 'elastic' (default 1,2,4,8,elastic)")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    profile, workload, out, write = ec.resolve_args(args)
    if args.one:
        run_one(args.one, profile, workload, args.result)
        return 0
    settings = parse_settings(args.settings)
    print(profile.describe())
    print(f"workload: {ec.workload_markdown(workload)}")
    child_argv = [a for a in argv]
    started = time.monotonic()
    results: dict[str, dict[str, Any]] = {}
    for s in settings:
        print(f"--- {label(s)}", flush=True)
        results[s] = run_child(s, child_argv, log=lambda line: print(line, flush=True))
    wall = time.monotonic() - started
    rows = [{"setting": s, **r} for s, res in results.items() for r in res["rows"]]
    ec.write_csv(out / "necessity.csv", rows, ["setting", *ec.ROW_FIELDS])
    ec.write_csv(out / "necessity_summary.csv", [res["summary"] for res in results.values()], SUMMARY_FIELDS)
    plot(results, profile, workload, out / "necessity.png")
    print_table(results)
    print(f"\nwrote {out / 'necessity.csv'}, {out / 'necessity_summary.csv'}, {out / 'necessity.png'} "
          f"({wall / 60:.1f} min)")
    if write:
        rel = (out / "necessity.png").resolve()
        try:
            figure = str(rel.relative_to(ec.DOC.parent.resolve()))
        except ValueError:
            figure = str(rel)
        write_section(ec.DOC, SECTION, report(results, profile, workload, ec.command_line(argv, "necessity.py"),
                                              figure, wall))
        print(f"updated {ec.DOC} section {SECTION!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
