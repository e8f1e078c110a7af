#!/usr/bin/env python3
"""Turns charge_benchmark's JSON (--benchmark_out, with repetitions) into the
ratio tables of tests/bench/RESULTS.md: every figure is the median of the
repetitions, every ratio is against a baseline from the same run.

  charge_ratios.py RESULTS.json
"""
import json
import sys


def load(path):
    with open(path) as f:
        data = json.load(f)
    med, cv = {}, {}
    for b in data["benchmarks"]:
        if b.get("run_type") != "aggregate":
            continue
        key = b["run_name"]
        if b["aggregate_name"] == "median":
            med[key] = b
        elif b["aggregate_name"] == "cv":
            cv[key] = b
    return data.get("context", {}), med, cv


def engine_key(hier, pattern, batch, additions, threads, path=False):
    name = "BM_EngineChargeUnchargePath" if path else "BM_EngineChargeUncharge"
    return (f"{name}/hier:{hier}/pattern:{pattern}/batch:{batch}"
            f"/additions:{additions}/real_time/threads:{threads}")


# charge_benchmark's "stock" argument (SetStockMode).
STOCK_MODES = ("kernel's 7 slots (default)", "+ uncharges through the stock",
               "+ uncharges + pool", "+ uncharges + pool + victim table (all)")


def mops(b):
    return b["items_per_second"] / 1e6


def cvs(cv, key):
    b = cv.get(key)
    return f"{100 * b['items_per_second']:.0f}%" if b else "n/a"


def paired_rows(med, cv, prefix):
    """Median rows of the paired benchmarks whose run_name starts with
    prefix, in the order they ran."""
    rows = []
    for key, b in med.items():
        if key.startswith(prefix):
            c = cv.get(key)
            rows.append((key, b, 100 * c["ratio"] if c else float("nan")))
    return sorted(rows, key=lambda r: r[0])


def threads_of(key):
    return key.rsplit("threads:", 1)[1] if "threads:" in key else "1"


def print_paired(med, cv, prefix, title, baseline, variant):
    rows = paired_rows(med, cv, prefix)
    if not rows:
        return
    print(f"\n{title}\n")
    print(f"| case | threads | {baseline} Mops/s | {variant} Mops/s | "
          f"ratio {variant}/{baseline} (median) | CV of the ratio |")
    print("|---|---|---|---|---|---|")
    for key, b, c in rows:
        print(f"| {b.get('label', '')} | {threads_of(key)} | "
              f"{b['base_Mops']:.2f} | {b['variant_Mops']:.2f} | "
              f"**{b['ratio']:.3f}** | {c:.1f}% |")


def main():
    ctx, med, cv = load(sys.argv[1])
    print(f"Load average at start: {ctx.get('load_avg', 'n/a')}; "
          f"{ctx.get('num_cpus')} CPUs. Paired benchmarks: median of the "
          "repetitions of ratio = throughput(variant) / throughput(baseline) "
          "measured in alternating slices inside one benchmark; Mops/s = "
          "million ops (a charge or an uncharge) per second, summed over "
          "threads, while that side ran.")

    print_paired(med, cv, "BM_PairedHierarchy/",
                 "(b)/(a): 3-level leaf with min/low on top vs a group "
                 "directly under the root, batch 64 (goal >= 0.95 at 2 "
                 "threads)", "(a)", "(b)")
    print_paired(med, cv, "BM_PairedReadBeforeXchg",
                 "Part (A): the page_counter walk alone (try_charge + uncharge "
                 "of 3 pages at the leaf of root/t/m/leaf, min/low on t), "
                 "always xchg (pre-2022) -> read before xchg",
                 "always xchg", "read before xchg")
    print_paired(med, cv, "BM_PairedLayout/",
                 "Part (B): the same walk, packed (pre-2022) -> padded "
                 "page_counter layout (benchmark copies of the algorithm)",
                 "packed", "padded")
    print_paired(med, cv, "BM_PairedBatch/",
                 "Part (C): batch 32 -> 64 and 1 (no stock) -> 64, 3-level "
                 "leaf", "smaller batch", "batch 64")
    print_paired(med, cv, "BM_PairedAdditions/",
                 "The additions: the kernel's stock (the default) -> "
                 "uncharges through the stock + victim table + pool, batch 64",
                 "kernel", "additions")
    print_paired(med, cv, "BM_PairedHandle/",
                 "GroupHandle: path overloads -> handle overloads",
                 "path", "handle")
    print_paired(med, cv, "BM_PairedRoundRobin/",
                 "Stock scalability: one CPU slot, N groups round-robin "
                 "against 1 group", "1 group", "N groups")

    print("\npage_counter walks of the split pattern (BM_StockWalks, a "
          "count, not a timing)\n")
    print("| stock | walks per 1000 charge/uncharge pairs |")
    print("|---|---|")
    for mode, sname in enumerate(STOCK_MODES[:3]):
        b = med.get(f"BM_StockWalks/stock:{mode}/iterations:1")
        if b:
            print(f"| {sname} | {b['walks_per_1000_pairs']:.3f} |")

    print("\nStock hit rates, one CPU slot, groups round-robin "
          "(BM_StockRoundRobin)\n")
    print("| groups | stock | Mops/s | slot hit | victim-table hit | "
          "stock hit (slot + victim) | pool hit | drains/op |")
    print("|---|---|---|---|---|---|---|---|")
    for mode, sname in enumerate(STOCK_MODES):
        for groups in (1, 7, 8, 64):
            b = med.get(f"BM_StockRoundRobin/groups:{groups}/stock:{mode}"
                        f"/real_time")
            if b:
                slot, victim = b["stock_hit"], b.get("victim_hit", 0)
                print(f"| {groups} | {sname} | {mops(b):.2f} | "
                      f"{slot:.3f} | {victim:.3f} | {slot + victim:.3f} | "
                      f"{b.get('pool_hit', 0):.3f} | "
                      f"{b.get('drains_per_op', 0):.3f} |")

    print("\nSeparate (unpaired) runs, for absolute figures: batch 64, "
          "median Mops/s (CV)\n")
    print("| group | pattern | stock | 1 thread | 2 threads |")
    print("|---|---|---|---|---|")
    for hier, hname in ((0, "root-level (a)"), (1, "3-level (b)")):
        for pattern, pname in ((0, "local"), (1, "split")):
            for additions, sname in ((0, "kernel (default)"),
                                     (1, "additions")):
                cells = []
                for threads in (1, 2):
                    k = engine_key(hier, pattern, 64, additions, threads)
                    cells.append(f"{mops(med[k]):.2f} ({cvs(cv, k)})"
                                 if k in med else "n/a")
                print(f"| {hname} | {pname} | {sname} | {cells[0]} | "
                      f"{cells[1]} |")


if __name__ == "__main__":
    main()
