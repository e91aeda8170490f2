"""Extraction time on ~1 MB adversarial model outputs (issue 15: under 50 ms each).

    .venv/bin/python tests/benchmarks/bench_extraction.py [--size 1000000] [--timeout 60]

For every text of tests/adversarial_texts.py, the whole `SignalExtractor().forecasts` is
timed without logprobs and with OpenAI chat logprobs spelling that text (16-character
tokens, two candidates each), each in a child process killed after --timeout seconds (the
old extractor needs minutes on some). Printed per text: the median of --repeats runs,
and the baseline measured in the same run, `text.lower()` plus one `str.rfind` over the
same text (what any scan of the whole text costs at least). Then the worst and the median
over all texts.

The with-logprobs figure includes parsing the logprob objects, which is linear in their
number; a separate line prints that cost for a realistic payload (4-character tokens,
top-5 candidates, 250,000 entries for 1 MB): it is the reading of Python dicts, not the
text, that dominates there.

To measure another checkout (e.g. the old main) with the same script:
    git archive main tps_tracer | tar -x -C /tmp/old
    PYTHONPATH=/tmp/old .venv/bin/python tests/benchmarks/bench_extraction.py
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: adversarial_texts

from adversarial_texts import CASES, SIZE, chat_logprobs


def _median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run_one(name: str, size: int, repeats: int) -> dict[str, float]:
    from tps_tracer.capture import SignalExtractor

    case = next(c for c in CASES if c.name == name)
    text = case.build(size)
    lp = chat_logprobs(text)
    ex = SignalExtractor()
    base = _median_time(lambda: text.lower().rfind("confidence"), repeats)
    plain = _median_time(lambda: ex.forecasts(text), repeats)
    with_lp = _median_time(lambda: ex.forecasts(text, lp), repeats)
    return {"baseline": base, "text": plain, "logprobs": with_lp, "chars": len(text)}


def realistic_payload(size: int, repeats: int) -> tuple[int, float]:
    from tps_tracer.capture import SignalExtractor

    text = ("Thought: I should look this up. Action: search\nAction Input: Paris\n" * (size // 60))[:size]
    cands = [{"token": f"c{j}", "logprob": math.log(0.5) - j, "bytes": [99]} for j in range(5)]
    content = [
        {"token": text[i : i + 4], "logprob": -0.1, "bytes": list(text[i : i + 4].encode()), "top_logprobs": cands}
        for i in range(0, len(text), 4)
    ]
    ex = SignalExtractor()
    return len(content), _median_time(lambda: ex.forecasts(text, {"content": content}), repeats)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=SIZE)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one, args.size, args.repeats)))
        return
    print(f"SignalExtractor.forecasts on adversarial texts of ~{args.size:,} characters, median of {args.repeats}")
    print(f"{'text':32s} {'baseline':>10s} {'text only':>11s} {'+logprobs':>11s}")
    worst: list[float] = []
    for case in CASES:
        cmd = [sys.executable, __file__, "--one", case.name, "--size", str(args.size), "--repeats", str(args.repeats)]
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, check=True)
            r = json.loads(out.stdout)
            worst.append(max(r["text"], r["logprobs"]))
            print(f"{case.name:32s} {r['baseline'] * 1e3:8.2f}ms {r['text'] * 1e3:9.2f}ms {r['logprobs'] * 1e3:9.2f}ms")
        except subprocess.TimeoutExpired:
            worst.append(math.inf)
            print(f"{case.name:32s} {'':>10s} > {args.timeout:.0f} s (killed)")
        except subprocess.CalledProcessError as exc:
            worst.append(math.inf)
            print(f"{case.name:32s} failed: {exc.stderr.strip().splitlines()[-1]}")
    print(f"worst {max(worst) * 1e3:.2f} ms, median {statistics.median(worst) * 1e3:.2f} ms (max of the two columns)")
    n, t = realistic_payload(args.size, 3)
    per_token = t / n * 1e9
    print(f"realistic payload: {n:,} tokens, top-5 candidates: {t * 1e3:.1f} ms ({per_token:.0f} ns/token)")


if __name__ == "__main__":
    main()
