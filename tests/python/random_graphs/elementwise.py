"""Element-wise op families of the generator: unary, scalar, binary (with
broadcasting) and ``where`` statements."""
from .builder import _Reject


class ElementwiseFamilies:
    """The ``unary``, ``scalar``, ``binary`` and ``where`` families of ``_Builder``."""

    def unary(self):
        a = self.pick()
        v = self.vals[a]
        if not self.is_float(a):
            op = self.rng.choice(["neg", "abs", "relu"])
        else:
            op = self.rng.choice(["exp", "tanh", "sigmoid", "relu", "neg", "abs", "sqrt", "rsqrt", "log",
                                  "gelu"])
        if op == "abs":
            name = self.emit(self.rng.choice([f"torch.abs({a})", f"{a}.abs()"]), [a], exact=v.exact)
            return name
        if not self.is_float(a):
            return self.emit(f"torch.{op}({a})", [a], exact=True)
        if op in ("sqrt", "rsqrt", "log"):
            x = self.guard_pos(a)
            return self.emit(f"torch.{op}({x})", [a], pos=op != "log")
        if op == "gelu":
            approximate = self.rng.choice(["none", "tanh"])
            return self.emit(f"F.gelu({a}, approximate='{approximate}')", [a])
        form = self.rng.choice([f"torch.{op}({a})", f"{a}.{op}()"])
        if op == "relu" and self.rng.random() < 0.3:
            form = f"F.relu({a})"
        pos = {"exp": True, "sigmoid": True, "tanh": v.pos}.get(op, False)
        exact = op in ("relu", "neg") and v.exact
        return self.emit(form, [a], pos=pos, exact=exact)

    def scalar(self):
        a = self.pick()
        v = self.vals[a]
        if not self.is_float(a) and self.rng.random() < 0.6:
            c = self.rng.choice([1, 2, 3, -1])
            form = self.rng.choice([f"{a} + {c}", f"{a} * {c}", f"{a} - {c}"])
            return self.emit(form, [a], exact=True)
        c = self.rng.choice([2.5, 0.5, 1.0, 2.0, 3.0, 0.25, -1.5])
        form, pos = self.rng.choice([
            (f"{a} * {c}", v.pos and c > 0),
            (f"{c} * {a}", v.pos and c > 0),
            (f"{a} + {abs(c)}", v.pos),
            (f"{a} - {abs(c)}", False),
            (f"{abs(c)} - {a}", False),
            (f"{a} / {c}", v.pos and c > 0),
        ])
        exact = v.exact and c in (1.0, 2.0, 0.5, 0.25) and ("*" in form or "/" in form)
        return self.emit(form, [a], pos=pos, exact=exact and v.exact)

    def binary(self):
        a = self.pick()
        b = self.partner(a)
        if b is None:
            raise _Reject("no partner")
        va, vb = self.vals[a], self.vals[b]
        op = self.rng.choice(["add", "sub", "mul", "div", "maximum", "add_alpha", "mask"])
        if self.rng.random() < 0.5 and op != "div":
            a, b, va, vb = b, a, vb, va
        if op == "mask":  # times a bool tensor: kernels read it as bytes
            if not self.is_float(a):
                raise _Reject("a mask multiplies a float")
            return self.emit(f"{a} * ({b} > 0)", [a, b], pos=va.pos, exact=va.exact)
        if op == "div":
            return self.emit(f"{a} / {self.guard_pos(b)}", [a, b], pos=va.pos)
        if op == "add_alpha":
            alpha = self.rng.choice([2, 0.5, -1])
            return self.emit(f"torch.add({a}, {b}, alpha={alpha})", [a, b],
                             pos=va.pos and vb.pos and alpha > 0)
        sym = {"add": "+", "sub": "-", "mul": "*"}
        if op in sym:
            form = self.rng.choice([f"{a} {sym[op]} {b}", f"torch.{op}({a}, {b})"])
            pos = op in ("add", "mul") and va.pos and vb.pos
            both_int = not self.is_float(a) and not self.is_float(b)
            return self.emit(form, [a, b], pos=pos, exact=both_int)
        return self.emit(f"torch.maximum({a}, {b})", [a, b], pos=va.pos or vb.pos,
                         exact=va.exact and vb.exact)

    def where(self):
        c = self.pick(lambda n: self.vals[n].exact)
        if c is None:
            raise _Reject("no exact value for a condition")
        a = self.partner(c)
        if a is None:
            raise _Reject("no partner")
        b = self.partner(a) if self.rng.random() < 0.7 else None
        other = b if b is not None else self.rng.choice(["0.0", "1.0"])
        if self.rng.random() < 0.5 or self.vals[c].pos:
            d = self.partner(c) if self.rng.random() < 0.4 else None
            if d is not None and self.vals[d].exact:
                cond, cops = f"{c} > {d}", [c, d]
            else:
                cond, cops = f"{c} > {self.rng.choice(['0', '1', '-1'])}", [c]
        else:
            cond, cops = f"{c} <= 0", [c]
        ops = cops + [a] + ([b] if b is not None else [])
        va = self.vals[a]
        vb = self.vals[b] if b is not None else None
        pos = va.pos and (vb.pos if vb else other == "1.0")
        exact = va.exact and (vb.exact if vb else True)
        return self.emit(f"torch.where({cond}, {a}, {other})", ops, pos=pos, exact=exact)
