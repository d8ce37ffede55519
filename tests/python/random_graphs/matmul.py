"""The matmul op family of the generator: matmul (1-d, 2-d, batched with
broadcasting, either side), ``@`` and bmm statements."""
from .builder import _Reject
from .config import FLOAT32, MATMUL, SIZES


class MatmulFamilies:
    """The ``matmul`` family of ``_Builder``."""

    def matmul(self):
        a = self.pick(lambda n: self.is_float(n) and self.t(n).dim() >= 1)
        if a is None:
            raise _Reject("no float value")
        rng = self.rng
        shape = self.shape(a)
        r = len(shape)
        m = rng.choice(SIZES)
        if r == 3 and rng.random() < 0.3 and self.can_add_input():
            b = self.new_input((shape[0], shape[2], m), FLOAT32)
            return self.emit(f"torch.bmm({a}, {b})", [a, b], cls=MATMUL)
        if rng.random() < 0.3:
            # An earlier value that fits.
            def fits(n):
                s = self.shape(n)
                return (n != a and self.is_float(n) and len(s) >= 1
                        and s[-1 if len(s) == 1 else -2] == shape[-1])
            b = self.pick(fits)
            if b is not None:
                return self.emit(f"torch.matmul({a}, {b})", [a, b], cls=MATMUL)
        if not self.can_add_input():
            raise _Reject("no inputs left")
        left = r >= 2 and rng.random() < 0.3
        if left:  # b @ a, b: [n, a.shape[-2]] or batched
            bshape = (m, shape[-2])
            if r >= 3 and rng.random() < 0.5:
                bshape = tuple(1 if rng.random() < 0.3 else d for d in shape[:-2]) + bshape
            b = self.new_input(bshape, FLOAT32)
            return self.emit(rng.choice([f"torch.matmul({b}, {a})", f"{b} @ {a}"]), [b, a], cls=MATMUL)
        k = shape[-1]
        if r == 1 or rng.random() < 0.2:
            bshape = rng.choice([(k,), (k, m)])
        else:
            bshape = (k, m)
            if r >= 3 and rng.random() < 0.5:
                bshape = tuple(1 if rng.random() < 0.3 else d for d in shape[:-2]) + bshape
        b = self.new_input(bshape, FLOAT32)
        return self.emit(rng.choice([f"torch.matmul({a}, {b})", f"{a} @ {b}"]), [a, b], cls=MATMUL)
