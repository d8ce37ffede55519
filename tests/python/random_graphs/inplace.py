"""The in-place op family of the generator: ``add_`` / ``mul_`` / ``sub_`` /
``div_`` / ``relu_`` on intermediates or inputs, also through views."""
from .builder import _Reject


class InplaceFamilies:
    """The ``inplace`` family of ``_Builder``."""

    def inplace(self):
        # Intermediates mostly; inputs now and then.
        a = self.pick(lambda n: not self.vals[n].is_input or self.rng.random() < 0.2)
        if a is None:
            raise _Reject("no value")
        v = self.vals[a]
        rng = self.rng
        kind = rng.choice(["add_", "mul_", "add_", "mul_", "sub_", "div_", "add_c", "mul_c", "relu_"])
        if kind == "relu_":
            return self.emit(f"{a}.relu_()", [a], exact=v.exact, inplace=a)
        if kind in ("add_c", "mul_c"):
            c = rng.choice([2, 3, -1]) if not self.is_float(a) else rng.choice([2.5, 0.5, 1.0, -1.5])
            op = kind[:-2]
            return self.emit(f"{a}.{op}_({c})", [a], pos=v.pos and c > 0,
                             exact=not self.is_float(a), inplace=a)
        b = self.partner(a, to_shape_of_a=True)
        if b is None:
            raise _Reject("no partner")
        vb = self.vals[b]
        if kind == "div_":
            return self.emit(f"{a}.div_({self.guard_pos(b)})", [a, b], pos=v.pos, inplace=a)
        alpha = ""
        if kind == "add_" and self.is_float(a) and rng.random() < 0.2:
            alpha = f", alpha={rng.choice([2, 0.5])}"
        both_int = not self.is_float(a) and not self.is_float(b)
        return self.emit(f"{a}.{kind}({b}{alpha})", [a, b], pos=kind != "sub_" and v.pos and vb.pos,
                         exact=both_int, inplace=a)
