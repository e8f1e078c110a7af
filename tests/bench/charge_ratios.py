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


def engine_key(hier, pattern, batch, pool, threads, path=False):
    name = "BM_EngineChargeUnchargePath" if path else "BM_EngineChargeUncharge"
    return (f"{name}/hier:{hier}/pattern:{pattern}/batch:{batch}/pool:{pool}"
            f"/real_time/threads:{threads}")


def mops(b):
    return b["items_per_second"] / 1e6


def cvs(cv, key):
    b = cv.get(key)
    return f"{100 * b['items_per_second']:.0f}%" if b else "n/a"


def main():
    ctx, med, cv = load(sys.argv[1])
    print(f"Load average at start: {ctx.get('load_avg', 'n/a')}; "
          f"{ctx.get('num_cpus')} CPUs; repetitions as run. Mops/s = million "
          "ops (a charge or an uncharge) per second, median; CV = "
          "coefficient of variation over the repetitions.\n")

    print("(b)/(a): 3-level leaf with min/low on top vs a group under the "
          "root, batch 64 (goal >= 0.95 at 2 threads)\n")
    print("| pattern | stock | threads | (a) root-level Mops/s (CV) | "
          "(b) 3-level Mops/s (CV) | (b)/(a) |")
    print("|---|---|---|---|---|---|")
    for pattern, pname in ((0, "local"), (1, "split")):
        for pool, sname in ((1024, "slots + pool (default)"),
                            (0, "slots only (kernel)")):
            for threads in (1, 2):
                a = engine_key(0, pattern, 64, pool, threads)
                b = engine_key(1, pattern, 64, pool, threads)
                if a not in med or b not in med:
                    continue
                print(f"| {pname} | {sname} | {threads} | "
                      f"{mops(med[a]):.2f} ({cvs(cv, a)}) | "
                      f"{mops(med[b]):.2f} ({cvs(cv, b)}) | "
                      f"{mops(med[b]) / mops(med[a]):.3f} |")

    print("\n(b)/(a) measured in one benchmark (BM_PairedDeepVsRoot: both "
          "groups in one engine, threads alternate 2000-pair slices between "
          "them at a barrier), batch 64\n")
    print("| pattern | stock | threads | (b)/(a) median (CV) | Mops/s, both "
          "halves |")
    print("|---|---|---|---|---|")
    for pattern, pname in ((0, "local"), (1, "split")):
        for pool, sname in ((1024, "slots + pool (default)"),
                            (0, "slots only (kernel)")):
            for threads in (1, 2):
                k = (f"BM_PairedDeepVsRoot/pattern:{pattern}/pool:{pool}"
                     f"/real_time/threads:{threads}")
                if k not in med:
                    continue
                c = cv.get(k)
                cvtext = f"{100 * c['b_over_a']:.1f}%" if c else "n/a"
                print(f"| {pname} | {sname} | {threads} | "
                      f"{med[k]['b_over_a']:.3f} ({cvtext}) | "
                      f"{mops(med[k]):.2f} |")

    print("\npage_counter walks of the split pattern (BM_StockWalks, a "
          "count, not a timing)\n")
    print("| stock | walks per 1000 charge/uncharge pairs |")
    print("|---|---|")
    for pool, sname in ((0, "slots only (kernel)"), (1024, "slots + pool")):
        b = med.get(f"BM_StockWalks/pool:{pool}/iterations:1")
        if b:
            print(f"| {sname} | {b['walks_per_1000_pairs']:.3f} |")

    print("\nPart (C), the batch: 3-level leaf, batch 64 against 32 and 1 "
          "(1 = no stock)\n")
    print("| pattern | stock | threads | batch 64 Mops/s | batch 32 Mops/s | "
          "batch 1 Mops/s | 64/32 | 64/1 |")
    print("|---|---|---|---|---|---|---|---|")
    for pattern, pname in ((0, "local"), (1, "split")):
        for pool, sname in ((1024, "slots + pool"), (0, "slots only")):
            for threads in (1, 2):
                k64 = engine_key(1, pattern, 64, pool, threads)
                k32 = engine_key(1, pattern, 32, pool, threads)
                k1 = engine_key(1, pattern, 1, 1024, threads)
                if k64 not in med or k32 not in med:
                    continue
                one = med.get(k1)
                print(f"| {pname} | {sname} | {threads} | "
                      f"{mops(med[k64]):.2f} | {mops(med[k32]):.2f} | "
                      f"{mops(one):.2f} | "
                      f"{mops(med[k64]) / mops(med[k32]):.3f} | "
                      f"{mops(med[k64]) / mops(one):.3f} |")

    print("\nThe pool: slots + pool against slots only (the kernel's stock), "
          "batch 64\n")
    print("| group | pattern | threads | slots only Mops/s | slots + pool "
          "Mops/s | pool/slots |")
    print("|---|---|---|---|---|---|")
    for hier, hname in ((0, "root-level"), (1, "3-level")):
        for pattern, pname in ((0, "local"), (1, "split")):
            for threads in (1, 2):
                k0 = engine_key(hier, pattern, 64, 0, threads)
                k1 = engine_key(hier, pattern, 64, 1024, threads)
                if k0 in med and k1 in med:
                    print(f"| {hname} | {pname} | {threads} | "
                          f"{mops(med[k0]):.2f} | {mops(med[k1]):.2f} | "
                          f"{mops(med[k1]) / mops(med[k0]):.3f} |")

    print("\nGroupHandle against the path overloads (batch 64, pool)\n")
    print("| group | pattern | threads | path Mops/s | handle Mops/s | "
          "handle/path |")
    print("|---|---|---|---|---|---|")
    for hier, hname in ((0, "root-level"), (1, "3-level")):
        for pattern, pname in ((0, "local"), (1, "split")):
            for threads in (1, 2):
                kp = engine_key(hier, pattern, 64, 1024, threads, path=True)
                kh = engine_key(hier, pattern, 64, 1024, threads)
                if kp in med and kh in med:
                    print(f"| {hname} | {pname} | {threads} | "
                          f"{mops(med[kp]):.2f} | {mops(med[kh]):.2f} | "
                          f"{mops(med[kh]) / mops(med[kp]):.3f} |")

    def chain(impl, rbx, threads):
        return med.get(f"BM_PageCounterChain/impl:{impl}/rbx:{rbx}"
                       f"/real_time/threads:{threads}")

    print("\nParts (A) and (B): the page_counter walk alone (try_charge + "
          "uncharge of 3 pages at the leaf of root/t/m/leaf, min/low on t)\n")
    print("| change | threads | baseline Mops/s | with the change Mops/s | "
          "ratio |")
    print("|---|---|---|---|---|")
    for threads in (1, 2):
        base, new = chain(0, 0, threads), chain(0, 1, threads)
        if base and new:
            print(f"| (A) read before xchg (engine PageCounter; baseline: "
                  f"always xchg) | {threads} | {mops(base):.2f} | "
                  f"{mops(new):.2f} | {mops(new) / mops(base):.3f} |")
    for rbx, rname in ((1, "read before xchg"), (0, "always xchg")):
        for threads in (1, 2):
            base, new = chain(2, rbx, threads), chain(1, rbx, threads)
            if base and new:
                print(f"| (B) padded layout (baseline: packed), {rname} | "
                      f"{threads} | {mops(base):.2f} | {mops(new):.2f} | "
                      f"{mops(new) / mops(base):.3f} |")
    for threads in (1, 2):
        real, copy = chain(0, 1, threads), chain(1, 1, threads)
        if real and copy:
            print(f"| (check) bench copy, padded, vs engine PageCounter | "
                  f"{threads} | {mops(real):.2f} | {mops(copy):.2f} | "
                  f"{mops(copy) / mops(real):.3f} |")

    print("\nStock scalability: one CPU slot, groups charged round-robin "
          "(3 pages, then uncharged)\n")
    print("| groups | stock | Mops/s | vs 1 group | stock hit | pool hit | "
          "slot drains/op |")
    print("|---|---|---|---|---|---|---|")
    for pool, sname in ((0, "slots only (kernel)"), (1024, "slots + pool")):
        base = med.get(f"BM_StockRoundRobin/groups:1/pool:{pool}/real_time")
        for groups in (1, 7, 8, 64):
            b = med.get(f"BM_StockRoundRobin/groups:{groups}/pool:{pool}"
                        f"/real_time")
            if not b or not base:
                continue
            print(f"| {groups} | {sname} | {mops(b):.2f} | "
                  f"{mops(b) / mops(base):.3f} | {b['stock_hit']:.3f} | "
                  f"{b.get('pool_hit', 0):.3f} | "
                  f"{b.get('drains_per_op', 0):.3f} |")


if __name__ == "__main__":
    main()
