"""Benchmark: the eSault paper's Fig. 6, automatic elasticity under a staged load, scaled to this machine.

    python bench/elastic.py             # ~3 minutes: 5 s warm-up + 2 cycles of 80 s
    python bench/elastic.py --quick     # ~1 minute smoke run (figures to a temp folder)
    python bench/elastic.py --cycle-seconds 120 --peak-rate 4000 --cost 0.001
    python bench/elastic.py --controller both   # the same curve under LatencyController, then DS2Controller

A word stream (key = word, Zipf-like) into a counter bolt whose per-tuple
lookup costs --cost seconds of GIL-free waiting, then a latency meter; see
bench/elastic_common.py. The counter starts with 1 SPU and its latency
monitor splits and merges it (JobConfig(elasticity=True)). Every second the
sampler records offered/input/processed rate, mean and p99 end-to-end latency,
the counter's SPU count, RSS and the spout's lag; every split and merge is
time-stamped from job.scaling_history with the pause its moved keys saw.

Writes docs/figures/elastic.csv (per second), docs/figures/elastic_events.csv
(per split/merge), docs/figures/elastic.png, and the results section of
docs/ELASTICITY.md between <!-- bench:elastic:start --> and
<!-- bench:elastic:end --> (--no-write to skip). SPUs are threads of this one
process (LocalCluster); the simulated work releases the GIL.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import elastic_common as ec
import numpy as np
from _report import write_section

SECTION = "elastic"
COMPARE_SECTION = "elastic-controllers"


# --- analysis -----------------------------------------------------------------------

def phase_table(result: ec.RunResult) -> list[dict[str, Any]]:
    """Per profile phase (rise1, peak1, ...): rates, latency over all its tuples, SPUs."""
    out: list[dict[str, Any]] = []
    order: list[str] = []
    groups: dict[str, list[int]] = {}
    for i, row in enumerate(result.rows):
        if row["phase"] not in groups:
            order.append(row["phase"])
            groups[row["phase"]] = []
        groups[row["phase"]].append(i)
    for phase in order:
        idx = groups[phase]
        rows = [result.rows[i] for i in idx]
        lat = np.concatenate([result.per_second[i] for i in idx]) * 1000
        spus = [r["spus"] for r in rows]
        out.append({
            "phase": phase, "seconds": len(rows),
            "offered": np.mean([r["offered_rate"] for r in rows]),
            "processed": np.mean([r["processed_rate"] for r in rows]),
            "mean_ms": float(lat.mean()) if len(lat) else float("nan"),
            "p99_ms": float(np.percentile(lat, 99)) if len(lat) else float("nan"),
            "max_ms": float(lat.max()) if len(lat) else float("nan"),
            "spus_min": min(spus), "spus_max": max(spus), "spus_end": spus[-1],
            "over_s": sum(1 for r in rows if r["latency_p99_ms"] != "" and r["latency_p99_ms"] > result_max_ms(result)),
        })
    return out


def result_max_ms(result: ec.RunResult) -> float:
    return result.workload.elasticity["max_latency"] * 1000


def windows_over(result: ec.RunResult) -> list[tuple[float, float]]:
    """Runs of consecutive seconds whose p99 exceeded max_latency: (start, end) in seconds."""
    limit = result_max_ms(result)
    out: list[tuple[float, float]] = []
    start = None
    prev = 0.0
    for row in result.rows:
        over = row["latency_p99_ms"] != "" and row["latency_p99_ms"] > limit
        t0 = row["t"] - 1.0
        if over and start is None:
            start = t0
        elif not over and start is not None:
            out.append((start, prev))
            start = None
        prev = row["t"]
    if start is not None:
        out.append((start, prev))
    return out


# --- figure -------------------------------------------------------------------------

def plot(result: ec.RunResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result.rows
    t = np.array([r["t"] for r in rows])
    num = lambda key: np.array([np.nan if r[key] == "" else float(r[key]) for r in rows])
    prof = result.profile
    fig, axes = plt.subplots(5, 1, figsize=(11, 13), sharex=True,
                             gridspec_kw={"height_ratios": [3, 3, 2, 2, 1.6]})
    for ax in axes:
        ec.shade_phases(ax, prof)
        ax.grid(alpha=0.3)

    ax = axes[0]
    seg_t = [s.start for s in prof.segments] + [prof.duration]
    seg_r = [s.rate for s in prof.segments] + [prof.segments[-1].rate]
    ax.step(seg_t, seg_r, where="post", color="0.4", ls="--", lw=1.2, label="offered (profile)")
    ax.plot(t - 0.5, num("input_rate"), color="tab:blue", lw=1.2, label="input (emitted by the spout)")
    ax.plot(t - 0.5, num("processed_rate"), color="tab:green", lw=1.2, label="processed (end to end)")
    ax.set_ylabel("tuples / s")
    ax.legend(loc="upper right", fontsize=8)
    title = (f"esault elasticity (paper Fig. 6, scaled): counter lookup {result.workload.cost * 1000:g} ms/tuple, "
             f"{ec.placement_text()}")
    ax.set_title(title, fontsize=10)

    ax = axes[1]
    ax.semilogy(t - 0.5, num("latency_mean_ms"), color="tab:blue", lw=1.2, label="mean")
    ax.semilogy(t - 0.5, num("latency_p99_ms"), color="tab:red", lw=1.0, label="p99")
    ax.axhline(result_max_ms(result), color="k", ls=":", lw=1.2, label=f"max_latency {result_max_ms(result):g} ms")
    ax.set_ylabel("end-to-end latency, ms")
    ax.legend(loc="upper right", fontsize=8)

    ax = axes[2]
    ax.step(t, num("spus"), where="pre", color="tab:purple", lw=1.5, label="counter SPUs")
    splits = [e for e in result.events if e.action == "split"]
    merges = [e for e in result.events if e.action == "merge"]
    if splits:
        ax.scatter([e.t_done for e in splits], [e.spus_after for e in splits], marker="^", color="tab:red",
                   s=30, zorder=3, label="split")
    if merges:
        ax.scatter([e.t_done for e in merges], [e.spus_after for e in merges], marker="v", color="tab:green",
                   s=30, zorder=3, label="merge")
    ax.set_ylabel("SPUs")
    ax.set_ylim(0, result.workload.elasticity["max_spus"] + 1)
    ax.legend(loc="upper right", fontsize=8)

    ax = axes[3]
    ax.plot(t - 0.5, num("rss_mb"), color="tab:brown", lw=1.2, label="RSS (MB)")
    ax.set_ylabel("RSS, MB")
    ax.set_ylim(bottom=0)
    ax2 = ax.twinx()
    ax2.plot(t - 0.5, num("lag_s"), color="tab:orange", lw=1.0, label="spout lag behind the profile (s)")
    ax2.set_ylabel("lag, s")
    ax2.set_ylim(0, max(1.0, float(np.nanmax(num("lag_s"))) * 1.1))
    lines = ax.get_lines() + ax2.get_lines()
    ax.legend(lines, [ln.get_label() for ln in lines], loc="upper left", fontsize=8)

    ax = axes[4]
    ax.plot(t - 0.5, num("cpu_pct"), color="tab:gray", lw=1.2, label="process CPU, % of one core")
    ax.plot(t - 0.5, num("steal_pct"), color="tab:pink", lw=1.0, label="machine CPU stolen by the host, %")
    ax.set_ylabel("%")
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper right", fontsize=8)
    ax.set_xlabel("seconds since the job started (grey: peak holds, blue: trough holds)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --- report -------------------------------------------------------------------------

def report(result: ec.RunResult, cmd: str, figure: str) -> str:
    s = result.latency_summary()
    limit = result_max_ms(result)
    wins = windows_over(result)
    over = sum(e - b for b, e in wins)
    f = result.final
    rss = [r["rss_mb"] for r in result.rows]
    splits = sum(1 for e in result.events if e.action == "split")
    merges = sum(1 for e in result.events if e.action == "merge")
    lines = [
        f"`{cmd}` on {ec.machine_line()}; whole run {result.wall_seconds:.0f} s.",
        "",
        f"- Profile: {result.profile.describe()}.",
        f"- Workload: {ec.workload_markdown(result.workload)}; the counter starts with 1 SPU.",
        f"- Counter elasticity: {ec.elasticity_markdown(result.workload)}.",
        "",
        f"![elasticity run]({figure})",
        "",
        ("Per phase (latency over every tuple that finished in the phase; `p99 > max` = seconds whose p99 "
         f"exceeded max_latency {limit:g} ms):"),
        "",
        "| phase | s | offered/s | processed/s | mean ms | p99 ms | max ms | SPUs min-max (end) | p99 > max |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | :---: | ---: |",
    ]
    for p in phase_table(result):
        lines.append(
            f"| {p['phase']} | {p['seconds']} | {p['offered']:,.0f} | {p['processed']:,.0f} | {p['mean_ms']:.1f} | "
            f"{p['p99_ms']:.1f} | {p['max_ms']:.0f} | {p['spus_min']}-{p['spus_max']} ({p['spus_end']}) | "
            f"{p['over_s']} |"
        )
    where = ": " + ", ".join(f"{b:.0f}-{e:.0f} s" for b, e in wins) if wins else ""
    cpu = [r["cpu_pct"] for r in result.rows]
    steal = [r["steal_pct"] for r in result.rows]
    whole = (
        f"Whole run: {s['n']:,} tuples, latency mean {s['mean_ms']:.1f} ms, p99 {s['p99_ms']:.1f} ms, max "
        f"{s['max_ms']:.0f} ms. Seconds with p99 above max_latency: {over:.0f} of {len(result.rows)}, in "
        f"{len(wins)} window(s){where}."
    )
    counts = (
        f"{splits} splits, {merges} merges; SPUs at the end: {f['spus_end']}. Emitted {f['emitted']:,}, reached "
        f"the meter {f['finished']:,}, acked {f['acked']:,}, failed {f['failed']}, owed but never emitted when the "
        f"profile ended {f['unsent']:,}. RSS {rss[0]:.0f} MB after 1 s, peak {max(rss):.0f} MB, end "
        f"{rss[-1]:.0f} MB. Process CPU {np.mean(cpu):.0f}% of one core on average (max {max(cpu):.0f}%); CPU "
        f"stolen by the host {np.mean(steal):.1f}% on average (max {max(steal):.1f}%)."
    )
    lines += [
        "",
        whole,
        counts,
        "",
        ("The pause moved keys saw (the receiver held their tuples from the route switch until the giver's "
         "state arrived) and the whole reconfiguration (command to completion):"),
        "",
        ec.pause_markdown(result.events),
        "",
        "<details><summary>Every split and merge</summary>",
        "",
        ec.events_markdown(result.events),
        "",
        "</details>",
    ]
    if result.sampler_errors:
        lines += ["", f"Sampler errors: {len(result.sampler_errors)} (first: {result.sampler_errors[0]})."]
    return "\n".join(lines)


def print_summary(result: ec.RunResult) -> None:
    print()
    print(f"{'phase':<9} {'s':>3} {'offered':>8} {'processed':>9} {'mean ms':>8} {'p99 ms':>8} {'max ms':>8} "
          f"{'SPUs':>7} {'p99>max':>7}")
    for p in phase_table(result):
        print(f"{p['phase']:<9} {p['seconds']:>3} {p['offered']:>8,.0f} {p['processed']:>9,.0f} {p['mean_ms']:>8.1f} "
              f"{p['p99_ms']:>8.1f} {p['max_ms']:>8.0f} {p['spus_min']:>3}-{p['spus_max']:<3} {p['over_s']:>7}")
    print()
    for r in ec.pause_table(result.events):
        print(f"{r['action']:<5} x{r['count']:<3} keys paused ms min/median/max {r['pause_min']:.1f} / "
              f"{r['pause_median']:.1f} / {r['pause_max']:.1f}; reconfiguration ms {r['reconf_min']:.1f} / "
              f"{r['reconf_median']:.1f} / {r['reconf_max']:.1f}; keys moved median {r['keys_median']:.0f}")
    s = result.latency_summary()
    print(f"\nwhole run: {s['n']:,} tuples, mean {s['mean_ms']:.1f} ms, p99 {s['p99_ms']:.1f} ms, "
          f"max {s['max_ms']:.0f} ms; "
          f"final {result.final}")


def ds2_controller(workload: ec.Workload):
    """DS2 on the counter, with the same SPU bounds the latency rules get."""
    from esault.control import DS2Controller

    return lambda: DS2Controller([ec.COUNTER], interval=2.0, min_spus=workload.elasticity["min_spus"],
                                 max_spus=workload.elasticity["max_spus"], headroom=1.2, cooldown=6.0)


def controller_row(name: str, result: ec.RunResult) -> dict[str, Any]:
    """One line of the side-by-side table: what the policy spent (SPU-seconds, changes) and what it bought."""
    s = result.latency_summary()
    wins = windows_over(result)
    spus = [r["spus"] for r in result.rows]
    return {
        "controller": name, "seconds": len(result.rows), "changes": len(result.events),
        "keys_moved": sum(e.moved_keys for e in result.events),
        "spu_seconds": sum(spus), "spus_max": max(spus) if spus else 0,
        "mean_ms": s["mean_ms"], "p99_ms": s["p99_ms"],
        "over_s": sum(e - b for b, e in wins), "lag_max": max((r["lag_s"] for r in result.rows), default=0.0),
        "finished": result.final["finished"], "failed": result.final["failed"],
    }


def compare_plot(results: dict[str, ec.RunResult], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"latency": "tab:purple", "ds2": "tab:orange"}
    any_result = next(iter(results.values()))
    prof = any_result.profile
    fig, axes = plt.subplots(3, 1, figsize=(11, 9), sharex=True, gridspec_kw={"height_ratios": [2, 2, 2]})
    for ax in axes:
        ec.shade_phases(ax, prof)
        ax.grid(alpha=0.3)
    seg_t = [seg.start for seg in prof.segments] + [prof.duration]
    seg_r = [seg.rate for seg in prof.segments] + [prof.segments[-1].rate]
    axes[0].step(seg_t, seg_r, where="post", color="0.4", ls="--", lw=1.2, label="offered (profile)")
    for name, result in results.items():
        t = np.array([r["t"] for r in result.rows])
        num = lambda key: np.array([np.nan if r[key] == "" else float(r[key]) for r in result.rows])
        axes[0].plot(t - 0.5, num("processed_rate"), color=colours.get(name), lw=1.1, label=f"processed ({name})")
        axes[1].step(t, num("spus"), where="pre", color=colours.get(name), lw=1.5, label=f"counter SPUs ({name})")
        axes[2].semilogy(t - 0.5, num("latency_p99_ms"), color=colours.get(name), lw=1.0, label=f"p99 ({name})")
    axes[0].set_ylabel("tuples / s")
    axes[1].set_ylabel("SPUs")
    axes[2].axhline(result_max_ms(any_result), color="k", ls=":", lw=1.2,
                    label=f"max_latency {result_max_ms(any_result):g} ms")
    axes[2].set_ylabel("end-to-end p99, ms")
    axes[2].set_xlabel("seconds since the job started (grey: peak holds, blue: trough holds)")
    axes[0].set_title(f"One load curve, two controllers: the paper's latency rules vs DS2 (rate-based); "
                      f"{ec.placement_text()}", fontsize=10)
    for ax in axes:
        ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def compare_report(results: dict[str, ec.RunResult], cmd: str, figure: str) -> str:
    rows = [controller_row(name, result) for name, result in results.items()]
    any_result = next(iter(results.values()))
    lines = [
        f"`{cmd}` on {ec.machine_line()}: the same profile run twice, one controller each, back to back.",
        "",
        f"- Profile: {any_result.profile.describe()}.",
        f"- Workload: {ec.workload_markdown(any_result.workload)}; the counter starts with 1 SPU.",
        f"- `latency`: the built-in LatencyController ({ec.elasticity_markdown(any_result.workload)}).",
        "- `ds2`: DS2Controller every 2 s, headroom 1.2, cool-down 6 s, same SPU bounds; the latency rules off.",
        "",
        f"![controllers compared]({figure})",
        "",
        "| controller | s | reconfigurations | keys moved | SPU-seconds | SPUs max | mean ms | p99 ms | "
        "s with p99 > max | spout lag max s | finished | failed |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(f"| {r['controller']} | {r['seconds']} | {r['changes']} | {r['keys_moved']:,} | "
                     f"{r['spu_seconds']} | {r['spus_max']} | {r['mean_ms']:.1f} | {r['p99_ms']:.1f} | "
                     f"{r['over_s']:.0f} | {r['lag_max']:.1f} | {r['finished']:,} | {r['failed']} |")
    for name, result in results.items():
        lines += ["", f"<details><summary>Every reconfiguration of `{name}`</summary>", "",
                  ec.events_markdown(result.events), "", "</details>"]
    return "\n".join(lines)


def run_one(name: str, profile: ec.Profile, workload: ec.Workload) -> ec.RunResult:
    if name == "ds2":
        return ec.run_profile("ds2", profile, workload, parallelism=1, elastic=False,
                              controller=ds2_controller(workload))
    return ec.run_profile("elastic", profile, workload, parallelism=1, elastic=True)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ec.add_common_args(parser, cycle_seconds=80.0, cycles=2, quick_cycle=28.0, quick_cycles=2, quick_warmup=3.0)
    parser.add_argument("--controller", choices=["latency", "ds2", "both"], default="latency",
                        help="latency: the built-in LatencyController (the paper's Fig. 6, default); ds2: "
                             "DS2Controller instead; both: one run each and a side-by-side comparison")
    args = parser.parse_args(argv)
    profile, workload, out, write = ec.resolve_args(args)
    print(profile.describe())
    print(f"workload: {ec.workload_markdown(workload)}")
    print(f"elasticity: {workload.elasticity}")
    names = ["latency", "ds2"] if args.controller == "both" else [args.controller]
    results: dict[str, ec.RunResult] = {}
    for controller in names:
        print(f"\n--- controller: {controller}")
        result = results[controller] = run_one(controller, profile, workload)
        # The Fig. 6 files and section belong to a run of the latency rules alone; a comparison writes its own.
        name = "elastic" if args.controller == "latency" else f"elastic_{controller}"
        csv_path, events_path, png = out / f"{name}.csv", out / f"{name}_events.csv", out / f"{name}.png"
        ec.write_csv(csv_path, result.rows, ec.ROW_FIELDS)
        ec.write_csv(events_path, [ec.as_dict(e) for e in result.events], list(ec.ScalingEvent.__dataclass_fields__))
        plot(result, png)
        print_summary(result)
        for d in result.decisions[:3]:
            print(f"latency controller: {d[0]} SPU {d[1]}: {d[2]}")
        print(f"\nwrote {csv_path}, {events_path}, {png}")
        if write and args.controller == "latency":
            write_section(ec.DOC, SECTION, report(result, ec.command_line(argv, "elastic.py"), figure_path(png)))
            print(f"updated {ec.DOC} section {SECTION!r}")
    if len(results) > 1:
        png = out / "elastic_controllers.png"
        compare_plot(results, png)
        print(f"\n{'controller':<10} {'changes':>7} {'SPU-s':>6} {'mean ms':>8} {'p99 ms':>8} {'p99>max s':>9}")
        for r in (controller_row(n, res) for n, res in results.items()):
            print(f"{r['controller']:<10} {r['changes']:>7} {r['spu_seconds']:>6} {r['mean_ms']:>8.1f} "
                  f"{r['p99_ms']:>8.1f} {r['over_s']:>9.0f}")
        if write:
            write_section(ec.DOC, COMPARE_SECTION, compare_report(results, ec.command_line(argv, "elastic.py"),
                                                                  figure_path(png)))
            print(f"updated {ec.DOC} section {COMPARE_SECTION!r}")
    return 0


def figure_path(png: Path) -> str:
    """The figure's path relative to the doc when it is under docs/, else absolute."""
    rel = png.resolve()
    try:
        return str(rel.relative_to(ec.DOC.parent.resolve()))
    except ValueError:
        return str(rel)


if __name__ == "__main__":
    sys.exit(main())
