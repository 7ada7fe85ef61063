"""A slow, obviously-correct HyperController (Algorithm 1) in plain Python/NumPy float64.

Tests only. Models live in a dict keyed by (i, context tuple, arm); every step loops
over hyperparameters and arms explicitly.
"""
import numpy as np


class ReferenceController:
    """n_arms: arms per hyperparameter (default d each; a categorical has one per option)."""

    def __init__(self, h, d, s, ridge=1.0, beta=0.0, n_arms=None):
        self.h, self.d, self.s, self.ridge, self.beta = h, d, s, ridge, beta
        self.n_arms = [d] * h if n_arms is None else [int(n) for n in n_arms]
        self.V, self.B = {}, {}
        self.history = [[0] * s for _ in range(h)]  # last s arms per hyperparameter, oldest first
        self.window = [0.0] * s  # last s objectives, oldest first
        self.t = 0
        self.arms = None

    def _model(self, i, ctx, a):
        key = (i, ctx, a)
        if key not in self.V:
            self.V[key] = self.ridge * np.eye(self.s)
            self.B[key] = np.zeros(self.s)
        return self.V[key], self.B[key]

    def G(self, i, ctx, a):
        V, B = self._model(i, ctx, a)
        return np.linalg.solve(V, B)

    def scores(self):
        """list over i of list over a of the predicted objective (all 0 while t < s)."""
        out = []
        xi = np.array(self.window)
        for i in range(self.h):
            ctx = tuple(self.history[i])
            row = []
            for a in range(self.n_arms[i]):
                if self.t < self.s:
                    row.append(0.0)
                    continue
                V, _ = self._model(i, ctx, a)
                value = float(self.G(i, ctx, a) @ xi)
                if self.beta > 0:
                    value += self.beta * float(np.sqrt(xi @ np.linalg.solve(V, xi)))
                row.append(value)
            out.append(row)
        return out

    def tell(self, x):
        if not np.isfinite(x):
            return
        xi = np.array(self.window)
        if self.t >= self.s:
            for i in range(self.h):
                key = (i, tuple(self.history[i]), self.arms[i])
                V, B = self._model(*key)
                self.V[key] = V + np.outer(xi, xi)
                self.B[key] = B + x * xi
        self.window = self.window[1:] + [float(x)]
        for i in range(self.h):
            self.history[i] = self.history[i][1:] + [self.arms[i]]
        self.t += 1
