"""Indexing cases: index_select, gather, advanced indexing, embedding and
masked_fill."""
import torch
import torch.nn.functional as F

from .core import I64, I32, BOOL, FLOATS, INTS, R, I, M, case, dt

# --- indexing -----------------------------------------------------------------

IDX = torch.tensor([4, 0, 2, 2])  # a duplicate: the backward must accumulate
for dtype in FLOATS + INTS + (BOOL,):
    make = (lambda s, d=dtype: R(s, d)) if dtype.is_floating_point else (
        M if dtype == BOOL else (lambda s, d=dtype: I(s, d)))
    d = dt(dtype)
    case(f"index_select_dim0-{d}", lambda x, i: torch.index_select(x, 0, i), make((5, 3)), IDX)
    case(f"index_select_dim1-{d}", lambda x, i: x.index_select(1, i), make((3, 5)), IDX)
    case(f"index_select_empty_index-{d}", lambda x, i: x.index_select(0, i), make((5, 3)),
         torch.zeros(0, dtype=I64))
    case(f"gather_dim1-{d}", lambda x, i: torch.gather(x, 1, i), make((3, 4)), I((3, 5), I64, 0, 4))
    case(f"gather_dim0-{d}", lambda x, i: torch.gather(x, 0, i), make((3, 4)), I((2, 4), I64, 0, 3))
    case(f"gather_empty_index-{d}", lambda x, i: torch.gather(x, 1, i), make((3, 4)),
         torch.zeros(3, 0, dtype=I64))
    case(f"index_tensor-{d}", lambda x, i: x[i], make((5, 3)), IDX)
    case(f"index_tensor_dim1-{d}", lambda x, i: x[:, i], make((3, 5)), IDX)
for dtype in FLOATS:
    d = dt(dtype)
    case(f"index_select_i32_index-{d}", lambda x, i: x.index_select(0, i), R((5, 3), dtype),
         IDX.to(I32))
    case(f"index_select_1d-{d}", lambda x, i: x.index_select(0, i), R((5,), dtype), IDX)
    case(f"gather_3d-{d}", lambda x, i: x.gather(2, i), R((2, 3, 4), dtype), I((2, 3, 2), I64, 0, 4))
    case(f"embedding-{d}-3", F.embedding, I((3,), I64, 0, 10), R((10, 4), dtype))
    case(f"embedding-{d}-2x3", F.embedding, I((2, 3), I64, 0, 10), R((10, 4), dtype))
    case(f"embedding_dup-{d}", F.embedding, torch.tensor([[1, 1], [7, 1]]), R((10, 4), dtype))
    case(f"embedding_i32-{d}", F.embedding, I((2, 3), I32, 0, 10), R((10, 4), dtype))
    case(f"embedding_padding_idx-{d}", lambda i, w: F.embedding(i, w, padding_idx=0),
         torch.tensor([0, 3, 0, 5]), R((10, 4), dtype))
    case(f"embedding_scale_grad_by_freq-{d}", lambda i, w: F.embedding(i, w, scale_grad_by_freq=True),
         torch.tensor([2, 3, 2, 2]), R((10, 4), dtype))
    case(f"embedding_empty-{d}", F.embedding, torch.zeros(0, 2, dtype=I64), R((10, 4), dtype))

for dtype in FLOATS:
    d = dt(dtype)
    case(f"masked_fill-{d}-3x4", lambda x, m: x.masked_fill(m, -1e9), R((3, 4), dtype), M((3, 4)))
    case(f"masked_fill_broadcast-{d}-2x3x4_1x4", lambda x, m: x.masked_fill(m, 0.5),
         R((2, 3, 4), dtype), M((1, 4)))
    case(f"masked_fill_-inf-{d}", lambda x, m: x.masked_fill(m, float("-inf")), R((3, 4), dtype),
         M((3, 4)))
    # A 0-dim tensor fill value of the input's own dtype (bound now: a lambda
    # reading the loop variable at call time would see its last value).
    case(f"masked_fill_0dim_value-{d}",
         lambda x, m, dtype=dtype: x.masked_fill(m, torch.tensor(2.0, dtype=dtype)),
         R((3, 4), dtype), M((3, 4)))
    case(f"masked_fill_empty-{d}", lambda x, m: x.masked_fill(m, 1.0), R((0, 4), dtype), M((0, 4)))
    # The attention pattern: mask, then softmax.
    case(f"masked_fill_softmax-{d}", lambda x, m: x.masked_fill(m, float("-inf")).softmax(-1),
         R((3, 4), dtype), torch.tensor([[False, True, True, True], [False, False, True, True],
                                         [False, False, False, True]]))
for dtype in INTS + (BOOL,):
    make = M if dtype == BOOL else (lambda s, d=dtype: I(s, d))
    case(f"masked_fill-{dt(dtype)}-3x4", lambda x, m: x.masked_fill(m, 1), make((3, 4)), M((3, 4)))
