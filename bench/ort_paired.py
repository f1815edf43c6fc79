"""ort_paired.py - what bench/encoder_latency.py and bench/vision_latency.py share: ONNX Runtime CPU
sessions made the same way for the two graphs compared, and the two timed paired and interleaved.

    from ort_paired import session, paired

session(path, threads, spinning=True)
    An InferenceSession on the CPU provider with ORT_ENABLE_ALL graph optimizations and `threads`
    intra-op threads; spinning=False sets session.intra_op.allow_spinning 0, so that the pool of the
    session that ran last does not keep the cores from the other one's.
paired(runs, reps)
    runs: two callables (A's and B's inference). Each repetition runs both, A then B in even
    repetitions, B then A in odd ones; returns the seconds of each, [[A...], [B...]], the i-th of
    A and of B measured next to each other.
"""
import statistics
import time

import onnxruntime as ort


def session(path, threads, spinning=True):
    o = ort.SessionOptions()
    o.intra_op_num_threads = threads
    o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if not spinning:
        o.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(path, o, providers=["CPUExecutionProvider"])


def paired(runs, reps):
    times = [[], []]
    for r in range(reps):
        for k in ((0, 1) if r % 2 == 0 else (1, 0)):
            t0 = time.perf_counter()
            runs[k]()
            times[k].append(time.perf_counter() - t0)
    return times


def median_ms(seconds):
    return statistics.median(seconds) * 1000
