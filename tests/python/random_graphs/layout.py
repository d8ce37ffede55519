"""The layout op family of the generator: reshape, view, flatten, unflatten,
transpose, permute, (un)squeeze, expand, slicing and contiguous
statements."""
from .builder import _Reject
from .config import SIZES


class LayoutFamilies:
    """The ``layout`` family of ``_Builder``."""

    def layout(self):
        a = self.pick()
        v = self.vals[a]
        shape = self.shape(a)
        r = len(shape)
        kinds = ["reshape", "view", "unsqueeze", "contiguous", "slice", "expand"]
        if r >= 2:
            kinds += ["transpose", "permute", "flatten", "transpose"]
        if 1 in shape:
            kinds.append("squeeze")
        if any(d > 1 and d % k == 0 for d in shape for k in (2, 3)):
            kinds.append("unflatten")
        kind = self.rng.choice(kinds)
        rng = self.rng
        if kind == "transpose":
            d0, d1 = rng.sample(range(r), 2)
            if r == 2 and rng.random() < 0.3:
                form = f"{a}.t()"
            else:
                form = f"{a}.transpose({d0}, {d1 - r if rng.random() < 0.3 else d1})"
        elif kind == "permute":
            perm = list(range(r))
            while perm == list(range(r)):
                rng.shuffle(perm)
            form = f"{a}.permute({', '.join(map(str, perm))})"
        elif kind == "unsqueeze":
            form = f"{a}.unsqueeze({rng.randint(-r - 1, r)})"
        elif kind == "squeeze":
            form = f"{a}.squeeze({rng.choice([d for d in range(r) if shape[d] == 1])})"
        elif kind == "contiguous":
            form = f"{a}.contiguous()"
        elif kind == "flatten":
            d0 = rng.randrange(r - 1)
            form = f"{a}.flatten({d0}, {rng.randint(d0 + 1, r - 1)})"
        elif kind == "unflatten":
            d, k = rng.choice([(d, k) for d in range(r) for k in (2, 3)
                               if shape[d] > 1 and shape[d] % k == 0])
            self_pin = k
            form = f"{a}.unflatten({d}, ({k}, -1))"
            return self._layout(form, a, v, pin=[self_pin])
        elif kind in ("reshape", "view"):
            if r >= 1 and rng.random() < 0.5:
                form = f"{a}.{kind}({a}.shape[0], -1)" if shape[0] else f"{a}.{kind}(-1)"
            elif r >= 2 and rng.random() < 0.5:
                form = f"{a}.{kind}(-1, {a}.shape[-1])" if shape[-1] else f"{a}.{kind}(-1)"
            else:
                form = f"{a}.{kind}(-1)"
        elif kind == "slice":
            if r == 0:
                raise _Reject("rank 0")
            d = rng.randrange(r)
            if shape[d] == 0:
                raise _Reject("empty dim")
            sl = rng.choice(["1:", ":-1", "::2", "0", "-1", "1::2"])
            if sl in ("1:", ":-1", "1::2") and shape[d] < 2:
                sl = "0"
            idx = ", ".join([":"] * d + [sl])
            if rng.random() < 0.5 or d == 0:
                form = f"{a}[{idx}]"
            else:  # the same slice, counted from the last dim
                form = f"{a}[..., {', '.join([sl] + [':'] * (r - d - 1))}]"
        else:  # expand
            new = [-1] * r
            pins = []
            for i, d in enumerate(shape):
                if d == 1 and rng.random() < 0.7:
                    new[i] = rng.choice(SIZES[1:6])
                    pins.append(new[i])
            if r < 4 and (rng.random() < 0.5 or not pins):
                lead = rng.choice(SIZES[1:6])
                new = [lead] + new
                pins.append(lead)
            return self._layout(f"{a}.expand({', '.join(map(str, new))})", a, v, pin=pins)
        return self._layout(form, a, v)

    def _layout(self, form, a, v, pin=()):
        if not v.same_layout and not _strides_free(form):
            # layout-changing-results: view legality and view-or-copy differ.
            raise _Reject("known bug: layout-changing-results")
        name = self.emit(form, [a], pos=v.pos, exact=v.exact, view=True)
        self.pinned.update(pin)
        return name


def _strides_free(form: str) -> bool:
    """Whether a layout statement gives the same result (a view, or
    an error) whatever its operand's strides: not view / reshape /
    flatten / unflatten / contiguous."""
    return not any(f".{m}(" in form for m in ("view", "reshape", "flatten", "unflatten", "contiguous"))
