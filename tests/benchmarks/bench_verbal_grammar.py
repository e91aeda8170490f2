"""Reading the stated confidence on ~1 MB adversarial texts, in process CPU time (issue 32: <= 50 ms).

    PYTHONPATH=$PWD .venv/bin/python tests/benchmarks/bench_verbal_grammar.py [--old /tmp/old] [--rounds 7]

For every text of tests/adversarial_texts.py: `VerbalConfidenceExtractor().from_text`, the
median of --rounds interleaved runs (time.process_time), next to a baseline measured in the
same rounds (`text.lower().rfind`, what any scan of the text costs at least) and, with --old,
the extractor of another checkout (`git archive <commit> tps_tracer | tar -x -C /tmp/old`)
run in the same rounds. Also prints how the old extractor reads the corpus of
tests/verbal_corpus.py (undeclared scale): the same reading, a different number, or None.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: adversarial_texts, verbal_corpus

from adversarial_texts import CASES, SIZE
from verbal_corpus import CORPUS

from tps_tracer.capture import VerbalConfidenceExtractor


def _old_extractor(root: str):
    spec = importlib.util.spec_from_file_location("old_verbal", Path(root) / "tps_tracer/capture/verbal_confidence.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["old_verbal"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module.VerbalConfidenceExtractor()


def _corpus_on(old) -> str:
    same = other = lost = 0
    forms = [f for f in CORPUS if f.scale is None]
    for f in forms:
        got = old.from_text(f.text).value
        want = f.value if f.status in ("ok", "clipped") else None
        if (got is None and want is None) or (None not in (got, want) and math.isclose(got, want, abs_tol=1e-12)):
            same += 1
        elif got is not None:
            other += 1
        else:
            lost += 1
    return f"old extractor on {len(forms)} corpus forms: {same} same reading, {other} a different number, {lost} None"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", help="root of another checkout's tps_tracer (compared in the same rounds)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--size", type=int, default=SIZE)
    args = ap.parse_args()
    new = VerbalConfidenceExtractor()
    old = _old_extractor(args.old) if args.old else None
    if old is not None:
        print(_corpus_on(old))
    head = f"{'text':30s} {'baseline':>9s} {'old':>9s} {'new':>9s} {'new/old':>8s}"
    print(head + f"   (ms of CPU, median of {args.rounds})")
    worst = []
    for case in CASES:
        text = case.build(args.size)
        runs = {"base": lambda t: t.lower().rfind("confidence"), "new": new.from_text}
        if old is not None:
            runs["old"] = old.from_text
        times: dict[str, list[float]] = {"base": [], "old": [], "new": []}
        for _ in range(args.rounds):  # interleaved: a slow moment of the machine hits all alike
            for name, fn in runs.items():
                t0 = time.process_time()
                fn(text)
                times[name].append(time.process_time() - t0)
        med = {k: statistics.median(v) * 1e3 if v else math.nan for k, v in times.items()}
        worst.append(med["new"])
        ratio = med["new"] / med["old"] if old is not None else math.nan
        print(f"{case.name:30s} {med['base']:9.2f} {med['old']:9.2f} {med['new']:9.2f} {ratio:8.2f}")
    print(f"new: worst {max(worst):.1f} ms, median {statistics.median(worst):.1f} ms")


if __name__ == "__main__":
    main()
