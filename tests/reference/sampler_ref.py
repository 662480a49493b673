"""An independent reference for pi-run's seeded sampling, written from llama.cpp's
documented order rather than from our C++: the logit biases added, then over the
distinct tokens of the last repeat_last_n the repetition penalty (positive logits divided
by the penalty, negative ones multiplied) and then OpenAI's frequency penalty (per
occurrence) and presence penalty (once) subtracted, then top-k, top-p and min-p on the untempered distribution, then the
temperature, then one draw: u = (the next 32-bit MT19937 output >> 8) / 2^24, the first
candidate (by logit, then id) whose cumulative probability exceeds u.

MT19937 is implemented here from its published definition (Matsumoto & Nishimura), so
the check does not rest on any library's generator or seeding.
"""
import numpy as np


class Mt19937:
    N, M = 624, 397

    def __init__(self, seed):
        self.mt = [0] * self.N
        self.mt[0] = seed & 0xFFFFFFFF
        for i in range(1, self.N):
            prev = self.mt[i - 1]
            self.mt[i] = (1812433253 * (prev ^ (prev >> 30)) + i) & 0xFFFFFFFF
        self.index = self.N

    def _twist(self):
        mt = self.mt
        for i in range(self.N):
            y = (mt[i] & 0x80000000) | (mt[(i + 1) % self.N] & 0x7FFFFFFF)
            v = mt[(i + self.M) % self.N] ^ (y >> 1)
            if y & 1:
                v ^= 0x9908B0DF
            mt[i] = v
        self.index = 0

    def next(self):
        if self.index >= self.N:
            self._twist()
        y = self.mt[self.index]
        self.index += 1
        y ^= y >> 11
        y ^= (y << 7) & 0x9D2C5680
        y ^= (y << 15) & 0xEFC60000
        y ^= y >> 18
        return y & 0xFFFFFFFF


def _softmax32(logits, temp):
    """float32 exponentials of (logit - max) / temp, normalized by their float64 sum."""
    z = np.exp(((logits - logits[0]) / np.float32(temp)).astype(np.float32))
    return (z.astype(np.float64) / z.astype(np.float64).sum()).astype(np.float32)


def sample(logits, history, rng, temp=0.8, top_k=40, top_p=0.95, min_p=0.05,
           repeat_penalty=1.0, frequency_penalty=0.0, presence_penalty=0.0, logit_bias=None):
    """The next token id. `history`: the last repeat_last_n accepted tokens, oldest first;
    logit_bias: {token id: bias}."""
    logits = np.asarray(logits, dtype=np.float32).copy()
    for t, b in (logit_bias or {}).items():
        logits[t] = np.float32(logits[t] + np.float32(b))
    f32 = np.float32
    for t in set(history):
        if repeat_penalty != 1.0:
            p = f32(repeat_penalty)
            logits[t] = logits[t] / p if logits[t] > 0 else logits[t] * p
        if frequency_penalty != 0.0 or presence_penalty != 0.0:
            drop = f32(f32(history.count(t)) * f32(frequency_penalty)) + f32(presence_penalty)
            logits[t] = f32(logits[t] - f32(drop))
    ids = np.arange(len(logits))
    order = np.lexsort((ids, -logits))  # by logit descending, then id
    if temp <= 0:
        return int(order[0])
    if 0 < top_k < len(order):
        order = order[:top_k]
    cand = logits[order]
    if top_p < 1.0:
        probs = _softmax32(cand, 1.0)
        cum = np.cumsum(probs.astype(np.float64))
        keep = int(np.argmax(cum >= np.float32(top_p))) + 1 if (cum >= np.float32(top_p)).any() \
            else len(cand)
        order, cand = order[:keep], cand[:keep]
    if min_p > 0.0:
        cut = np.float32(cand[0] + np.float32(np.log(np.float32(min_p))))
        keep = 1
        while keep < len(cand) and cand[keep] >= cut:
            keep += 1
        order, cand = order[:keep], cand[:keep]
    probs = _softmax32(cand, temp)
    u = np.float32(rng.next() >> 8) * np.float32(1.0 / 16777216.0)
    cum = np.float32(0.0)
    for i, p in enumerate(probs):
        cum = np.float32(cum + p)
        if u < cum:
            return int(order[i])
    return int(order[-1])


def selftest():
    # The first outputs of mt19937 seeded with 5489 (the C++ standard requires the
    # 10000th to be 4123659995).
    g = Mt19937(5489)
    first = [g.next() for _ in range(10000)]
    assert first[0] == 3499211612 and first[-1] == 4123659995, first[:2]


if __name__ == "__main__":
    selftest()
    print("sampler_ref: MT19937 matches the standard's check value")
