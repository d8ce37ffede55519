"""Reduction op families of the generator: sum / mean / amax over dims, and
softmax / log_softmax / layer_norm statements."""
from .builder import _Reject
from .config import FLOAT32, REDUCTION
from .program import _rows_nearly_constant


class ReductionFamilies:
    """The ``reduction`` and ``normalization`` families of ``_Builder``."""

    def reduction(self):
        a = self.pick()
        v = self.vals[a]
        r = self.t(a).dim()
        op = self.rng.choice(["sum", "mean", "amax"])
        if r == 0 or self.rng.random() < 0.15:
            return self.emit(f"{a}.{op}()" if op != "amax" else f"torch.amax({a})", [a],
                             cls=REDUCTION, pos=v.pos and self.t(a).numel() > 0,
                             exact=op == "amax" and v.exact)
        k = self.rng.randint(1, r)
        dims = sorted(self.rng.sample(range(r), k))
        dims = [d - r if self.rng.random() < 0.3 else d for d in dims]
        if len(dims) == 1 and self.rng.random() < 0.5:
            dim = str(dims[0])
        else:
            dim = f"({', '.join(map(str, dims))},)"
        keep = self.rng.random() < 0.4
        kw = ", keepdim=True" if keep else ""
        form = self.rng.choice([f"{a}.{op}({dim}{kw})", f"torch.{op}({a}, dim={dim}{kw})"])
        nonempty = all(self.t(a).shape[d] > 0 for d in dims)
        return self.emit(form, [a], cls=REDUCTION, pos=v.pos and nonempty,
                         exact=(op == "amax" and v.exact) or (op == "sum" and not self.is_float(a)))

    def normalization(self):
        a = self.pick(self.is_float)
        if a is None:
            raise _Reject("no float value")
        r = self.t(a).dim()
        kind = self.rng.choice(["softmax", "log_softmax", "layer_norm"])
        if kind == "layer_norm":
            if r == 0 or _rows_nearly_constant(self.t(a)):
                # layer-norm-decomposed (see KNOWN_BUGS); ill-conditioned too.
                raise _Reject("rank 0 or known bug: layer-norm-decomposed")
            n = self.t(a).shape[-1]
            if self.rng.random() < 0.5 and self.can_add_input():
                w = self.new_input((n,), FLOAT32, "positive")
                b = self.new_input((n,), FLOAT32, "normal")
                name = self.emit(f"F.layer_norm({a}, {a}.shape[-1:], {w}, {b})", [a, w, b], cls=REDUCTION)
            else:
                name = self.emit(f"F.layer_norm({a}, {a}.shape[-1:])", [a], cls=REDUCTION)
            self.row_checks[len(self.lines) - 1] = a
            return name
        dim = -1 if r == 0 or self.rng.random() < 0.75 else self.rng.randrange(-r, r)
        form = self.rng.choice([f"torch.{kind}({a}, dim={dim})", f"{a}.{kind}({dim})",
                                f"F.{kind}({a}, dim={dim})"])
        return self.emit(form, [a], cls=REDUCTION, pos=kind == "softmax")
