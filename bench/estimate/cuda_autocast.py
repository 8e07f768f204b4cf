"""Emulates CUDA autocast on CPU, to measure what a mixed-precision (amp)
training step keeps. CPU autocast uses other op lists than CUDA (it keeps
fp32 copies CUDA would not), so this mode applies CUDA's lists instead
(PyTorch docs, "Autocast op reference", CUDA ops that autocast to float16 /
to float32): matmul-like ops cast their floating inputs to the low precision
dtype, the listed numerically sensitive ops to float32, every other op runs
in the dtype of its inputs. Like autocast, casts of leaf tensors that
require grad (the weights) are cached for the duration of the region, and
every cast is an ordinary differentiable op, recorded by autograd."""
import torch
from torch.overrides import TorchFunctionMode

LOW = {"linear", "matmul", "__matmul__", "mm", "bmm", "baddbmm", "addmm", "addbmm", "conv1d",
       "conv2d", "conv3d", "conv_transpose2d", "prelu", "chain_matmul", "addmv", "addr", "mv"}
FP32 = {"softmax", "log_softmax", "layer_norm", "group_norm", "pow", "__pow__", "__rpow__",
        "rsqrt", "exp", "log", "sum", "prod", "cumsum", "norm", "normalize", "cross_entropy",
        "nll_loss", "cross_entropy_loss", "nll_loss_nd", "mse_loss", "l1_loss", "smooth_l1_loss", "kl_div", "softplus", "reciprocal",
        "__rtruediv__", "acos", "asin", "cosh", "sinh", "tan", "erfinv", "expm1", "log1p", "log2",
        "log10", "binary_cross_entropy_with_logits", "cosine_similarity", "cdist", "renorm"}


class CudaAutocast(TorchFunctionMode):
    def __init__(self, dtype=torch.bfloat16):
        super().__init__()
        self.dtype = dtype
        self.cache = {}

    def _cast(self, x, dtype):
        if not (torch.is_tensor(x) and x.is_floating_point()) or x.dtype == dtype:
            return x
        if x.is_leaf and x.requires_grad:  # weights: cached like autocast does
            key = (id(x), dtype)
            if key not in self.cache:
                self.cache[key] = x.to(dtype)
            return self.cache[key]
        return x.to(dtype)

    def _cast_all(self, args, dtype):
        if isinstance(args, (list, tuple)):
            return type(args)(self._cast_all(a, dtype) for a in args)
        if isinstance(args, dict):
            return {k: self._cast_all(v, dtype) for k, v in args.items()}
        return self._cast(args, dtype)

    # Python-level functionals (F.multi_head_attention_forward, ...) would
    # hand the whole call to the mode and run their bodies with it disabled;
    # real autocast works below them, at the dispatcher. So the mode skips
    # their torch-function check and sees the ops inside instead.
    def __enter__(self):
        import torch.nn.functional as F
        self._saved = (F.has_torch_function, F.has_torch_function_unary,
                       F.has_torch_function_variadic)
        F.has_torch_function = F.has_torch_function_unary = F.has_torch_function_variadic = \
            lambda *a, **k: False
        return super().__enter__()

    def __exit__(self, *exc):
        import torch.nn.functional as F
        (F.has_torch_function, F.has_torch_function_unary, F.has_torch_function_variadic) = self._saved
        return super().__exit__(*exc)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in LOW:
            args, kwargs = self._cast_all(args, self.dtype), self._cast_all(kwargs, self.dtype)
        elif name in FP32:
            args, kwargs = self._cast_all(args, torch.float32), self._cast_all(kwargs, torch.float32)
        return func(*args, **kwargs)
