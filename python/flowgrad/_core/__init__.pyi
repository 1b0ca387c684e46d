"""
flowgrad's C++ engine: tensors, ops, autograd.
"""
from __future__ import annotations
import collections.abc
from flowgrad import CheckpointError
from flowgrad import DTypeError
from flowgrad import DeviceError
from flowgrad import FlowgradError
from flowgrad import GraphError
from flowgrad import IndexOutOfRangeError
from flowgrad import InvalidArgumentError
from flowgrad import OutOfMemoryError
from flowgrad import ShapeError
import numpy
import typing
from . import functional
from . import cuda_runtime
from . import init
from . import optim
from . import flow
from . import plan
from . import return_types
from . import distributed
__all__: list[str] = ['AvgPool2d', 'BatchNorm1d', 'BatchNorm2d', 'Checkpoint', 'CheckpointError', 'Conv2d', 'DTypeError', 'DeviceError', 'Dropout', 'Embedding', 'Flatten', 'FlowBuilder', 'FlowgradError', 'GELU', 'GRU', 'GRUCell', 'Graph', 'GraphError', 'GroupNorm', 'Identity', 'IndexOutOfRangeError', 'InvalidArgumentError', 'LSTM', 'LSTMCell', 'LayerNorm', 'Linear', 'MaxPool2d', 'Module', 'ModuleList', 'MultiheadAttention', 'OutOfMemoryError', 'RMSNorm', 'ReLU', 'Sequential', 'ShapeError', 'SiLU', 'Sigmoid', 'Softmax', 'Tanh', 'Tensor', 'TransformerBlock', 'Trend', 'TrendGroup', 'abs', 'add', 'amax', 'amin', 'arange', 'argmax', 'argmin', 'argsort', 'bfloat16', 'blas_name', 'bool', 'broadcast_to', 'build_config', 'cat', 'chunk', 'clamp', 'clone', 'contiguous', 'cos', 'cpu_empty_cache', 'cpu_memory_stats', 'cuda_runtime', 'device', 'div', 'dtype', 'empty', 'eq', 'erf', 'exp', 'expand', 'eye', 'flatten', 'flip', 'float16', 'float32', 'float64', 'flow', 'format_duration', 'from_dlpack', 'from_numpy', 'full', 'functional', 'gather', 'ge', 'gelu', 'get_num_threads', 'get_rng_state', 'grad', 'gt', 'index_add', 'index_select', 'init', 'int32', 'int64', 'is_anomaly_enabled', 'is_grad_enabled', 'le', 'linspace', 'log', 'logsumexp', 'lt', 'manual_seed', 'masked_fill', 'matmul', 'max', 'maximum', 'mean', 'min', 'minimum', 'mul', 'narrow', 'ne', 'neg', 'nonzero', 'one_hot', 'ones', 'optim', 'pad', 'permute', 'plan', 'pow', 'promote_types', 'rand', 'randint', 'randn', 'randperm', 'relu', 'repeat', 'reshape', 'rsqrt', 'scatter_add', 'set_anomaly_enabled', 'set_grad_enabled', 'set_num_threads', 'set_rng_state', 'sigmoid', 'sign', 'silu', 'sin', 'softplus', 'sort', 'split', 'sqrt', 'square', 'squeeze', 'stack', 'std', 'sub', 'sum', 't', 'tanh', 'tensor', 'topk', 'transpose', 'unsqueeze', 'var', 'where', 'zeros']
class dtype:
    """
    A tensor element type (fg.float32, fg.int64, ...).
    
    Members:
    
      bool
    
      uint8
    
      int8
    
      int16
    
      int32
    
      int64
    
      float16
    
      bfloat16
    
      float32
    
      float64
    """
    __members__: typing.ClassVar[dict[str, dtype]]
    bfloat16: typing.ClassVar[dtype]
    bool: typing.ClassVar[dtype]
    float16: typing.ClassVar[dtype]
    float32: typing.ClassVar[dtype]
    float64: typing.ClassVar[dtype]
    int16: typing.ClassVar[dtype]
    int32: typing.ClassVar[dtype]
    int64: typing.ClassVar[dtype]
    int8: typing.ClassVar[dtype]
    uint8: typing.ClassVar[dtype]
    @staticmethod
    def __repr__(d):
        ...
    @staticmethod
    def __str__(d):
        ...
    @typing.overload
    def __eq__(self: numpy.dtype[typing.Any], other: numpy.dtype[typing.Any]) -> bool:
        ...
    @typing.overload
    def __eq__(self: numpy.dtype[typing.Any], other: typing.Any) -> bool:
        ...
    def __getstate__(self) -> int:
        ...
    def __hash__(self) -> int:
        ...
    def __index__(self: numpy.dtype[typing.Any]) -> int:
        ...
    def __init__(self: numpy.dtype[typing.Any], value: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __int__(self: numpy.dtype[typing.Any]) -> int:
        ...
    @typing.overload
    def __ne__(self: numpy.dtype[typing.Any], other: numpy.dtype[typing.Any]) -> bool:
        ...
    @typing.overload
    def __ne__(self: numpy.dtype[typing.Any], other: typing.Any) -> bool:
        ...
    def __setstate__(self: numpy.dtype[typing.Any], state: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    @property
    def is_floating_point(self) -> bool:
        """
        True for float16, bfloat16, float32 and float64.
        """
    @property
    def itemsize(self) -> int:
        """
        Bytes per element.
        """
    @property
    def name(self) -> str:
        ...
    @property
    def value(self) -> int:
        ...
class device:
    """
    A device: fg.device('cpu'), fg.device('cuda:0').
    """
    def __eq__(self, arg0: typing.Any) -> bool:
        ...
    def __hash__(self) -> int:
        ...
    def __init__(self, spec: typing.Any) -> None:
        ...
    def __repr__(self) -> str:
        ...
    def __str__(self) -> str:
        ...
    @property
    def index(self) -> typing.Any:
        ...
    @property
    def type(self) -> str:
        ...
class Tensor:
    """
    An n-dimensional array on a device, with autograd.
    """
    @staticmethod
    def __repr__(t):
        ...
    @staticmethod
    def __str__(t):
        ...
    def __abs__(self) -> Tensor:
        ...
    def __and__(self, arg0: typing.Any) -> Tensor:
        ...
    def __rand__(self, arg0: typing.Any) -> Tensor:
        ...
    def __or__(self, arg0: typing.Any) -> Tensor:
        ...
    def __ror__(self, arg0: typing.Any) -> Tensor:
        ...
    def __xor__(self, arg0: typing.Any) -> Tensor:
        ...
    def __rxor__(self, arg0: typing.Any) -> Tensor:
        ...
    def __invert__(self) -> Tensor:
        ...
    def __format__(self, spec: str) -> str:
        ...
    def __add__(self, arg0: typing.Any) -> Tensor:
        ...
    def __array__(self, dtype: typing.Any = None, copy: typing.Any = None) -> numpy.ndarray:
        ...
    def __bool__(self) -> bool:
        ...
    def __dlpack__(self, *, stream: typing.Any = None, max_version: typing.Any = None, dl_device: typing.Any = None, copy: typing.Any = None) -> typing.Any:
        """
        Exports the tensor as a DLPack capsule (versioned when max_version >= (1, 0)).
        """
    def __dlpack_device__(self) -> tuple[int, int]:
        """
        (device_type, device_id) in DLPack's codes.
        """
    def __eq__(self, arg0: typing.Any) -> Tensor:
        ...
    def __float__(self) -> float:
        ...
    def __ge__(self, arg0: typing.Any) -> Tensor:
        ...
    def __getitem__(self, arg0: typing.Any) -> Tensor:
        ...
    def __gt__(self, arg0: typing.Any) -> Tensor:
        ...
    def __hash__(self) -> int:
        ...
    def __iadd__(self, arg0: typing.Any) -> Tensor:
        ...
    def __imul__(self, arg0: typing.Any) -> Tensor:
        ...
    def __index__(self) -> int:
        ...
    def __int__(self) -> int:
        ...
    def __ipow__(self, arg0: typing.Any) -> Tensor:
        ...
    def __isub__(self, arg0: typing.Any) -> Tensor:
        ...
    def __itruediv__(self, arg0: typing.Any) -> Tensor:
        ...
    def __le__(self, arg0: typing.Any) -> Tensor:
        ...
    def __len__(self) -> int:
        ...
    def __lt__(self, arg0: typing.Any) -> Tensor:
        ...
    def __matmul__(self, arg0: typing.Any) -> Tensor:
        ...
    def __mul__(self, arg0: typing.Any) -> Tensor:
        ...
    def __ne__(self, arg0: typing.Any) -> Tensor:
        ...
    def __neg__(self) -> Tensor:
        ...
    def __pos__(self) -> Tensor:
        ...
    def __pow__(self, arg0: typing.Any) -> Tensor:
        ...
    def __radd__(self, arg0: typing.Any) -> Tensor:
        ...
    def __rmatmul__(self, arg0: typing.Any) -> Tensor:
        ...
    def __rmul__(self, arg0: typing.Any) -> Tensor:
        ...
    def __rpow__(self, arg0: typing.Any) -> Tensor:
        ...
    def __rsub__(self, arg0: typing.Any) -> Tensor:
        ...
    def __rtruediv__(self, arg0: typing.Any) -> Tensor:
        ...
    def __setitem__(self, arg0: typing.Any, arg1: typing.Any) -> None:
        ...
    def __sub__(self, arg0: typing.Any) -> Tensor:
        ...
    def __truediv__(self, arg0: typing.Any) -> Tensor:
        ...
    def _grad_fn_repr(self) -> str:
        ...
    def abs(self) -> Tensor:
        """
        Elementwise abs(x).
        """
    def add(self, other: typing.Any) -> Tensor:
        """
        Elementwise add(input, other) with NumPy broadcasting.
        """
    def add_(self, other: typing.Any, *, alpha: typing.SupportsFloat | typing.SupportsIndex = 1.0) -> Tensor:
        """
        self += alpha * other in place (broadcast to self's shape); returns self.
        """
    def amax(self, dim: typing.Any = None, keepdim: bool = False) -> Tensor:
        """
        amax over dim (None: every dim); keepdim keeps reduced dims as 1.
        """
    def amin(self, dim: typing.Any = None, keepdim: bool = False) -> Tensor:
        """
        amin over dim (None: every dim); keepdim keeps reduced dims as 1.
        """
    def argmax(self, dim: typing.SupportsInt | typing.SupportsIndex | None = None, keepdim: bool = False) -> Tensor:
        """
        Index of the first maximum (over the flattened tensor when dim is None).
        """
    def argmin(self, dim: typing.SupportsInt | typing.SupportsIndex | None = None, keepdim: bool = False) -> Tensor:
        """
        Index of the first minimum (over the flattened tensor when dim is None).
        """
    def argsort(self, dim: typing.SupportsInt | typing.SupportsIndex = -1, descending: bool = False) -> Tensor:
        """
        Indices that sort along dim.
        """
    def backward(self, gradient: typing.Any = None, retain_graph: bool = False, create_graph: bool = False) -> None:
        """
        Accumulates d(self)/d(leaf) into every leaf's .grad.
        """
    def bfloat16(self) -> Tensor:
        """
        Cast to bfloat16.
        """
    def bool(self) -> Tensor:
        """
        Cast to bool.
        """
    def bitwise_and(self, other: typing.Any) -> Tensor:
        """
        Elementwise bitwise_and(input, other) with NumPy broadcasting.
        """
    def bitwise_or(self, other: typing.Any) -> Tensor:
        """
        Elementwise bitwise_or(input, other) with NumPy broadcasting.
        """
    def bitwise_xor(self, other: typing.Any) -> Tensor:
        """
        Elementwise bitwise_xor(input, other) with NumPy broadcasting.
        """
    def logical_and(self, other: typing.Any) -> Tensor:
        """
        Elementwise logical_and(input, other) with NumPy broadcasting.
        """
    def logical_or(self, other: typing.Any) -> Tensor:
        """
        Elementwise logical_or(input, other) with NumPy broadcasting.
        """
    def logical_xor(self, other: typing.Any) -> Tensor:
        """
        Elementwise logical_xor(input, other) with NumPy broadcasting.
        """
    def bitwise_not(self) -> Tensor:
        """
        Elementwise bitwise_not(x).
        """
    def logical_not(self) -> Tensor:
        """
        Elementwise logical_not(x).
        """
    def byte(self) -> Tensor:
        """
        Cast to uint8.
        """
    def char(self) -> Tensor:
        """
        Cast to int8.
        """
    def short(self) -> Tensor:
        """
        Cast to int16.
        """
    def kthvalue(self, k: typing.SupportsInt | typing.SupportsIndex, dim: typing.SupportsInt | typing.SupportsIndex = -1, keepdim: bool = False) -> typing.Any:
        """
        Named tuple (values, indices) of the k-th smallest entry along dim (k counts from 1).
        """
    def broadcast_to(self, shape: typing.Any) -> Tensor:
        """
        A broadcast view with the given shape.
        """
    def chunk(self, chunks: typing.SupportsInt | typing.SupportsIndex, dim: typing.SupportsInt | typing.SupportsIndex = 0) -> list[Tensor]:
        """
        Splits into `chunks` nearly equal views.
        """
    def clamp(self, min: typing.SupportsFloat | typing.SupportsIndex | None = None, max: typing.SupportsFloat | typing.SupportsIndex | None = None) -> Tensor:
        """
        Limits values to [min, max]; either bound may be None.
        """
    def clamp_(self, min: typing.SupportsFloat | typing.SupportsIndex | None = None, max: typing.SupportsFloat | typing.SupportsIndex | None = None) -> Tensor:
        """
        Limits values to [min, max] in place (either bound may be None); returns self.
        """
    def clone(self) -> Tensor:
        """
        A copy that shares no memory with self (gradients flow back to self).
        """
    def contiguous(self) -> Tensor:
        """
        A row-major copy, or self when already so.
        """
    def copy_(self, src: typing.Any) -> Tensor:
        """
        Copies src (broadcast, cast, moved to self's device) into self in place; returns self.
        """
    def cos(self) -> Tensor:
        """
        Elementwise cos(x).
        """
    def cpu(self) -> Tensor:
        """
        A copy on the CPU (self when already there).
        """
    def cuda(self) -> Tensor:
        """
        A copy on the current CUDA device.
        """
    def data_ptr(self) -> int:
        """
        Address of the first element.
        """
    def detach(self) -> Tensor:
        """
        A view of the same data without autograd history.
        """
    def dim(self) -> int:
        """
        Number of dims.
        """
    def div(self, other: typing.Any) -> Tensor:
        """
        Elementwise div(input, other) with NumPy broadcasting.
        """
    def div_(self, other: typing.Any) -> Tensor:
        """
        self /= other in place (a float tensor: an integer one cannot hold the quotient); returns self.
        """
    def double(self) -> Tensor:
        """
        Cast to float64.
        """
    def eq(self, other: typing.Any) -> Tensor:
        """
        Elementwise eq(input, other) with NumPy broadcasting.
        """
    def erf(self) -> Tensor:
        """
        Elementwise erf(x).
        """
    def exp(self) -> Tensor:
        """
        Elementwise exp(x).
        """
    def expand(self, *args) -> Tensor:
        """
        A broadcast view (-1 keeps a dim).
        """
    def fill_(self, value: typing.SupportsFloat | typing.SupportsIndex) -> Tensor:
        """
        Fills with a value in place; returns self.
        """
    def flatten(self, start_dim: typing.SupportsInt | typing.SupportsIndex = 0, end_dim: typing.SupportsInt | typing.SupportsIndex = -1) -> Tensor:
        """
        Merges dims start_dim..end_dim into one.
        """
    def flip(self, dims: typing.Any) -> Tensor:
        """
        Reverses the order along the given dims.
        """
    def float(self) -> Tensor:
        """
        Cast to float32.
        """
    def gather(self, dim: typing.SupportsInt | typing.SupportsIndex, index: Tensor) -> Tensor:
        """
        out[i][j] = input[index[i][j]][j] (for dim 0); index matches input except in dim.
        """
    def ge(self, other: typing.Any) -> Tensor:
        """
        Elementwise ge(input, other) with NumPy broadcasting.
        """
    def gelu(self, approximate: str = 'none') -> Tensor:
        """
        GELU, exact (erf) or tanh-approximated.
        """
    def gt(self, other: typing.Any) -> Tensor:
        """
        Elementwise gt(input, other) with NumPy broadcasting.
        """
    def half(self) -> Tensor:
        """
        Cast to float16.
        """
    def index_add(self, dim: typing.SupportsInt | typing.SupportsIndex, index: Tensor, src: Tensor) -> Tensor:
        """
        A copy of input with src's slices added at a 1-D index along dim (repeats accumulate).
        """
    def index_select(self, dim: typing.SupportsInt | typing.SupportsIndex, index: Tensor) -> Tensor:
        """
        Entries of input at a 1-D index along dim.
        """
    def int(self) -> Tensor:
        """
        Cast to int32.
        """
    def is_contiguous(self) -> bool:
        """
        True when the layout is row-major compact.
        """
    def item(self) -> typing.Any:
        """
        The value of a one-element tensor as a Python scalar.
        """
    def le(self, other: typing.Any) -> Tensor:
        """
        Elementwise le(input, other) with NumPy broadcasting.
        """
    def log(self) -> Tensor:
        """
        Elementwise log(x).
        """
    def logsumexp(self, dim: typing.Any = None, keepdim: bool = False) -> Tensor:
        """
        logsumexp over dim (None: every dim); keepdim keeps reduced dims as 1.
        """
    def long(self) -> Tensor:
        """
        Cast to int64.
        """
    def lt(self, other: typing.Any) -> Tensor:
        """
        Elementwise lt(input, other) with NumPy broadcasting.
        """
    def masked_fill(self, mask: Tensor, value: typing.SupportsFloat | typing.SupportsIndex) -> Tensor:
        """
        A copy of input with value where mask is True.
        """
    def masked_fill_(self, mask: Tensor, value: typing.SupportsFloat | typing.SupportsIndex) -> Tensor:
        """
        Writes value where the (broadcast) bool mask is True; returns self.
        """
    def matmul(self, other: typing.Any) -> Tensor:
        """
        Matrix product with NumPy's matmul semantics.
        """
    def max(self, dim: typing.Any = None, keepdim: bool = False) -> typing.Any:
        """
        max over dim. An int dim gives a named tuple (values, indices) (fg.return_types.max); None or a tuple of dims gives the values; a tensor gives the elementwise maximum.
        """
    def maximum(self, other: typing.Any) -> Tensor:
        """
        Elementwise maximum(input, other) with NumPy broadcasting.
        """
    def mean(self, dim: typing.Any = None, keepdim: bool = False) -> Tensor:
        """
        mean over dim (None: every dim); keepdim keeps reduced dims as 1.
        """
    def min(self, dim: typing.Any = None, keepdim: bool = False) -> typing.Any:
        """
        min over dim. An int dim gives a named tuple (values, indices) (fg.return_types.min); None or a tuple of dims gives the values; a tensor gives the elementwise minimum.
        """
    def minimum(self, other: typing.Any) -> Tensor:
        """
        Elementwise minimum(input, other) with NumPy broadcasting.
        """
    def mul(self, other: typing.Any) -> Tensor:
        """
        Elementwise mul(input, other) with NumPy broadcasting.
        """
    def mul_(self, other: typing.Any) -> Tensor:
        """
        self *= other in place; returns self.
        """
    def narrow(self, dim: typing.SupportsInt | typing.SupportsIndex, start: typing.SupportsInt | typing.SupportsIndex, length: typing.SupportsInt | typing.SupportsIndex) -> Tensor:
        """
        A view of `length` entries from `start` along dim.
        """
    def ne(self, other: typing.Any) -> Tensor:
        """
        Elementwise ne(input, other) with NumPy broadcasting.
        """
    def neg(self) -> Tensor:
        """
        Elementwise neg(x).
        """
    def neg_(self) -> Tensor:
        """
        Negates in place; returns self.
        """
    def nonzero(self) -> Tensor:
        """
        Coordinates of the True elements, (count, ndim).
        """
    def normal_(self, mean: typing.SupportsFloat | typing.SupportsIndex = 0.0, std: typing.SupportsFloat | typing.SupportsIndex = 1.0) -> Tensor:
        """
        Fills with normal samples N(mean, std^2); returns self.
        """
    def numel(self) -> int:
        """
        Number of elements.
        """
    def numpy(self) -> numpy.ndarray:
        """
        A NumPy array sharing this CPU tensor's memory (no copy).
        """
    def pad(self, pad: typing.Any, value: typing.SupportsFloat | typing.SupportsIndex = 0.0) -> Tensor:
        """
        Constant padding; (left, right) pairs starting from the last dim.
        """
    def permute(self, *args) -> Tensor:
        """
        A view with the dims reordered.
        """
    def pow(self, other: typing.Any) -> Tensor:
        """
        Elementwise pow(input, other) with NumPy broadcasting.
        """
    def pow_(self, exponent: typing.Any) -> Tensor:
        """
        self = self ** exponent in place; returns self.
        """
    def relu(self) -> Tensor:
        """
        Elementwise relu(x).
        """
    def relu_(self) -> Tensor:
        """
        max(self, 0) in place; returns self.
        """
    def repeat(self, *args) -> Tensor:
        """
        Tiles the tensor (like numpy.tile).
        """
    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        """
        Sets requires_grad in place and returns self.
        """
    def reshape(self, *args) -> Tensor:
        """
        The same elements in a new shape (a view when possible; one -1 allowed).
        """
    def rsqrt(self) -> Tensor:
        """
        Elementwise rsqrt(x).
        """
    def scatter_add(self, dim: typing.SupportsInt | typing.SupportsIndex, index: Tensor, src: Tensor) -> Tensor:
        """
        A copy of input with src added at index along dim.
        """
    def sigmoid(self) -> Tensor:
        """
        Elementwise sigmoid(x).
        """
    def sign(self) -> Tensor:
        """
        Elementwise sign(x).
        """
    def silu(self) -> Tensor:
        """
        Elementwise silu(x).
        """
    def sin(self) -> Tensor:
        """
        Elementwise sin(x).
        """
    def size(self, dim: typing.Any = None) -> typing.Any:
        """
        The shape, or the size of one dim.
        """
    def softplus(self) -> Tensor:
        """
        Elementwise softplus(x).
        """
    def sort(self, dim: typing.SupportsInt | typing.SupportsIndex = -1, descending: bool = False) -> typing.Any:
        """
        Named tuple (values, indices) sorted along dim (stable; NaN last).
        """
    def split(self, split_size_or_sections: typing.Any, dim: typing.SupportsInt | typing.SupportsIndex = 0) -> list[Tensor]:
        """
        Views of equal-size pieces (int) or of the given sizes (list).
        """
    def sqrt(self) -> Tensor:
        """
        Elementwise sqrt(x).
        """
    def square(self) -> Tensor:
        """
        Elementwise square(x).
        """
    def squeeze(self, dim: typing.SupportsInt | typing.SupportsIndex | None = None) -> Tensor:
        """
        Removes size-1 dims (all, or the one given).
        """
    def std(self, dim: typing.Any = None, keepdim: bool = False, correction: typing.SupportsFloat | typing.SupportsIndex = 1.0) -> Tensor:
        """
        Standard deviation with divisor N - correction.
        """
    def stride(self) -> tuple:
        """
        Strides in elements.
        """
    def sub(self, other: typing.Any) -> Tensor:
        """
        Elementwise sub(input, other) with NumPy broadcasting.
        """
    def sub_(self, other: typing.Any, *, alpha: typing.SupportsFloat | typing.SupportsIndex = 1.0) -> Tensor:
        """
        self -= alpha * other in place; returns self.
        """
    def sum(self, dim: typing.Any = None, keepdim: bool = False) -> Tensor:
        """
        sum over dim (None: every dim); keepdim keeps reduced dims as 1.
        """
    def t(self) -> Tensor:
        """
        Transpose of a 2-D tensor.
        """
    def tanh(self) -> Tensor:
        """
        Elementwise tanh(x).
        """
    def to(self, target: typing.Any = None, device: typing.Any = None, dtype: typing.Any = None) -> Tensor:
        """
        A tensor on another device and/or with another dtype (self when nothing changes).
        """
    def tolist(self) -> typing.Any:
        """
        Nested Python lists of the values.
        """
    def topk(self, k: typing.SupportsInt | typing.SupportsIndex, dim: typing.SupportsInt | typing.SupportsIndex = -1, largest: bool = True) -> typing.Any:
    def clone(self) -> Tensor:
        """
        A copy with its own memory; gradients flow back to self.
    def topk(self, k: typing.SupportsInt | typing.SupportsIndex, dim: typing.SupportsInt | typing.SupportsIndex = -1, largest: bool = True) -> tuple:
        """
        Named tuple (values, indices) of the k largest (or smallest) entries along dim, sorted.
        """
    def transpose(self, dim0: typing.SupportsInt | typing.SupportsIndex, dim1: typing.SupportsInt | typing.SupportsIndex) -> Tensor:
        """
        A view with two dims swapped.
        """
    def uniform_(self, from_: typing.SupportsFloat | typing.SupportsIndex = 0.0, to: typing.SupportsFloat | typing.SupportsIndex = 1.0) -> Tensor:
        """
        Fills with uniform samples from [from, to); returns self.
        """
    def unsqueeze(self, dim: typing.SupportsInt | typing.SupportsIndex) -> Tensor:
        """
        Inserts a size-1 dim.
        """
    def var(self, dim: typing.Any = None, keepdim: bool = False, correction: typing.SupportsFloat | typing.SupportsIndex = 1.0) -> Tensor:
        """
        Variance with divisor N - correction.
        """
    def view(self, *args) -> Tensor:
        """
        A view with a new shape; ShapeError when the strides do not allow one.
        """
    def zero_(self) -> Tensor:
        """
        Fills with zeros in place; returns self.
        """
    @property
    def _version(self) -> int:
        """
        How many in-place writes the tensor's memory has had (views share it).
        """
    @property
    def T(self):
        """
        All dims reversed.
        """
    @property
    def device(self) -> device:
        """
        Device holding the data.
        """
    @property
    def dtype(self) -> numpy.dtype[typing.Any]:
        """
        Element type.
        """
    @property
    def grad(self) -> typing.Any:
        """
        The accumulated gradient (None until backward reaches this leaf).
        """
    @grad.setter
    def grad(self, arg1: typing.Any) -> None:
        ...
    @property
    def grad_fn(self) -> typing.Any:
        """
        Name of the op that produced this tensor, for display.
        """
    @property
    def is_leaf(self) -> bool:
        """
        True unless the tensor was produced by a recorded op.
        """
    @property
    def ndim(self) -> int:
        """
        Number of dims.
        """
    @property
    def requires_grad(self) -> bool:
        """
        Whether autograd records ops on this tensor.
        """
    @requires_grad.setter
    def requires_grad(self, arg1: bool) -> None:
        ...
    @property
    def shape(self) -> tuple:
        """
        The sizes of the dims, as a tuple.
        """
class Module:
    """
    Base class of layers and models. Subclass it in Python: assign parameters (fg.nn.Parameter), buffers and submodules as attributes and define forward.
    """
    def __call__(self, *args, **kwargs) -> typing.Any:
        """
        Runs forward.
        """
    def __delattr__(self, arg0: str) -> None:
        ...
    def __getattr__(self, arg0: str) -> typing.Any:
        ...
    def __init__(self) -> None:
        ...
    def __repr__(self) -> str:
        ...
    def __setattr__(self, arg0: str, arg1: typing.Any) -> None:
        ...
    def buffers(self, recurse: bool = True) -> list:
        """
        The buffers, in definition order.
        """
    def children(self) -> list:
        """
        The direct submodules.
        """
    def eval(self) -> typing.Any:
        """
        Sets evaluation mode (dropout off); returns self.
        """
    def extra_repr(self) -> str:
        """
        Text shown inside this module's repr parentheses.
        """
    def forward(self, *args) -> typing.Any:
        """
        The computation; subclasses override it.
        """
    def load_state_dict(self, state_dict: dict, strict: bool = True) -> None:
        """
        Copies values into the parameters and buffers; InvalidArgumentError names missing, unexpected and mis-shaped keys.
        """
    def modules(self) -> list:
        """
        This module and every submodule, depth first.
        """
    def named_buffers(self, recurse: bool = True) -> list:
        """
        (dotted name, buffer) pairs.
        """
    def named_children(self) -> list:
        """
        (name, submodule) pairs of the direct submodules.
        """
    def named_modules(self) -> list:
        """
        (dotted name, module) pairs, this module first under ''.
        """
    def named_parameters(self, recurse: bool = True) -> list:
        """
        (dotted name, parameter) pairs in definition order.
        """
    def num_parameters(self) -> int:
        """
        Total number of parameter elements.
        """
    def parameters(self, recurse: bool = True) -> list:
        """
        The parameters, in definition order (shared ones once).
        """
    def register_buffer(self, name: str, tensor: Tensor | None) -> None:
        """
        Registers a non-trainable tensor saved in state_dict.
        """
    def register_module(self, name: str, module: Module) -> None:
        """
        Registers a child module under name.
        """
    def register_parameter(self, name: str, tensor: Tensor | None) -> None:
        """
        Registers a parameter under name (None reserves the name).
        """
    def state_dict(self) -> dict:
        """
        Parameters and buffers by dotted name (detached, sharing memory).
        """
    def to(self, device: typing.Any) -> typing.Any:
        """
        Moves parameters and buffers to a device; returns self.
        """
    def train(self, mode: bool = True) -> typing.Any:
        """
        Sets training mode on the whole tree; returns self.
        """
    def zero_grad(self) -> None:
        """
        Sets every parameter's .grad to None.
        """
    @property
    def training(self) -> bool:
        """
        True in training mode.
        """
class Linear(Module):
    """
    y = x W^T + b.
    """
    def __init__(self, in_features: typing.SupportsInt | typing.SupportsIndex, out_features: typing.SupportsInt | typing.SupportsIndex, bias: bool = True) -> None:
        ...
    @property
    def in_features(self) -> int:
        ...
    @property
    def out_features(self) -> int:
        ...
class Embedding(Module):
    """
    Rows of a (num_embeddings, dim) table.
    """
    def __init__(self, num_embeddings: typing.SupportsInt | typing.SupportsIndex, embedding_dim: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
class LayerNorm(Module):
    """
    Layer normalisation with weight and bias.
    """
    def __init__(self, normalized_shape: typing.Any, eps: typing.SupportsFloat | typing.SupportsIndex = 1e-05) -> None:
        ...
class RMSNorm(LayerNorm):
    """
    RMS normalisation with a weight.
    """
    def __init__(self, normalized_shape: typing.Any, eps: typing.SupportsFloat | typing.SupportsIndex = 1e-06) -> None:
        ...
class Dropout(Module):
    """
    Zeroes entries with probability p in training.
    """
    def __init__(self, p: typing.SupportsFloat | typing.SupportsIndex = 0.5) -> None:
        ...
    @property
    def p(self) -> float:
        ...
    @p.setter
    def p(self, arg0: typing.SupportsFloat | typing.SupportsIndex) -> None:
        ...
class Conv2d(Module):
    """
    2-D convolution over NCHW input.
    """
    def __init__(self, in_channels: typing.SupportsInt | typing.SupportsIndex, out_channels: typing.SupportsInt | typing.SupportsIndex, kernel_size: typing.SupportsInt | typing.SupportsIndex, stride: typing.SupportsInt | typing.SupportsIndex = 1, padding: typing.SupportsInt | typing.SupportsIndex = 0, bias: bool = True) -> None:
        ...
class _Function(Module):
    pass
class ReLU(_Function):
    """
    max(x, 0) as a module.
    """
    def __init__(self) -> None:
        ...
class SiLU(_Function):
    """
    x * sigmoid(x) as a module.
    """
    def __init__(self) -> None:
        ...
class Tanh(_Function):
    """
    tanh as a module.
    """
    def __init__(self) -> None:
        ...
class Sigmoid(_Function):
    """
    sigmoid as a module.
    """
    def __init__(self) -> None:
        ...
class Identity(_Function):
    """
    Returns its input.
    """
    def __init__(self) -> None:
        ...
class GELU(_Function):
    """
    GELU as a module (approximate='none' or 'tanh').
    """
    def __init__(self, approximate: str = 'none') -> None:
        ...
class Softmax(_Function):
    """
    softmax along dim as a module.
    """
    def __init__(self, dim: typing.SupportsInt | typing.SupportsIndex = -1) -> None:
        ...
class Flatten(_Function):
    """
    Flattens dims start_dim..end_dim.
    """
    def __init__(self, start_dim: typing.SupportsInt | typing.SupportsIndex = 1, end_dim: typing.SupportsInt | typing.SupportsIndex = -1) -> None:
        ...
class MaxPool2d(_Function):
    """
    2-D max pooling.
    """
    def __init__(self, kernel_size: typing.SupportsInt | typing.SupportsIndex, stride: typing.SupportsInt | typing.SupportsIndex | None = None) -> None:
        ...
class AvgPool2d(_Function):
    """
    2-D average pooling.
    """
    def __init__(self, kernel_size: typing.SupportsInt | typing.SupportsIndex, stride: typing.SupportsInt | typing.SupportsIndex | None = None) -> None:
        ...
class Sequential(Module):
    """
    Runs modules in order.
    """
    def __getitem__(self, arg0: typing.SupportsInt | typing.SupportsIndex) -> Module:
        ...
    def __init__(self, *args) -> None:
        ...
    def __iter__(self) -> collections.abc.Iterator:
        ...
    def __len__(self) -> int:
        ...
    def append(self, module: Module) -> None:
        """
        Adds a module at the end.
        """
class ModuleList(Module):
    """
    A list of registered modules.
    """
    def __getitem__(self, arg0: typing.SupportsInt | typing.SupportsIndex) -> Module:
        ...
    def __init__(self, modules: typing.Any = None) -> None:
        ...
    def __iter__(self) -> collections.abc.Iterator:
        ...
    def __len__(self) -> int:
        ...
    def append(self, module: Module) -> None:
        """
        Adds a module at the end.
        """
class MultiheadAttention(Module):
    """
    Multi-head attention: m(x) for self-attention, m(q, k, v) otherwise; an attention mask may follow.
    """
    def __init__(self, dim: typing.SupportsInt | typing.SupportsIndex, heads: typing.SupportsInt | typing.SupportsIndex, causal: bool = False, dropout: typing.SupportsFloat | typing.SupportsIndex = 0.0) -> None:
        ...
class TransformerBlock(Module):
    """
    Pre-norm transformer block: x + attn(ln1(x)), then x + mlp(ln2(x)).
    """
    def __init__(self, dim: typing.SupportsInt | typing.SupportsIndex, heads: typing.SupportsInt | typing.SupportsIndex, mlp_ratio: typing.SupportsInt | typing.SupportsIndex = 4, causal: bool = True) -> None:
        ...
class GRUCell(Module):
    """
    One GRU step: m(x, h=None) -> h'.
    """
    def __init__(self, input_size: typing.SupportsInt | typing.SupportsIndex, hidden_size: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
class LSTMCell(Module):
    """
    One LSTM step: m(x, (h, c)=None) -> (h', c').
    """
    def __init__(self, input_size: typing.SupportsInt | typing.SupportsIndex, hidden_size: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
class Checkpoint(Module):
    """
    Gradient checkpointing: same outputs and gradients; intermediates recomputed in backward.
    """
    def __init__(self, module: Module) -> None:
        ...
class _BatchNorm(Module):
    @property
    def num_features(self) -> int: ...
    @property
    def eps(self) -> float: ...
    momentum: float | None
    @property
    def affine(self) -> bool: ...
    @property
    def track_running_stats(self) -> bool: ...
class BatchNorm1d(_BatchNorm):
    """
    Batch normalisation of (N, C) or (N, C, L) input per channel; running_mean/running_var buffers (momentum=None: cumulative average), batch statistics in training, running ones in eval.
    """
    def __init__(self, num_features: typing.SupportsInt | typing.SupportsIndex, eps: typing.SupportsFloat | typing.SupportsIndex = 1e-05, momentum: typing.SupportsFloat | typing.SupportsIndex | None = 0.1, affine: bool = True, track_running_stats: bool = True) -> None:
        ...
class BatchNorm2d(_BatchNorm):
    """
    Batch normalisation of (N, C, H, W) input per channel; running_mean/running_var buffers (momentum=None: cumulative average), batch statistics in training, running ones in eval.
    """
    def __init__(self, num_features: typing.SupportsInt | typing.SupportsIndex, eps: typing.SupportsFloat | typing.SupportsIndex = 1e-05, momentum: typing.SupportsFloat | typing.SupportsIndex | None = 0.1, affine: bool = True, track_running_stats: bool = True) -> None:
        ...
class GroupNorm(Module):
    """
    Group normalisation of (N, C, *) input: channels in num_groups groups, per-channel weight and bias.
    """
    def __init__(self, num_groups: typing.SupportsInt | typing.SupportsIndex, num_channels: typing.SupportsInt | typing.SupportsIndex, eps: typing.SupportsFloat | typing.SupportsIndex = 1e-05, affine: bool = True) -> None:
        ...
    @property
    def num_groups(self) -> int: ...
    @property
    def num_channels(self) -> int: ...
    @property
    def eps(self) -> float: ...
class _Recurrent(Module):
    @property
    def input_size(self) -> int: ...
    @property
    def hidden_size(self) -> int: ...
    @property
    def num_layers(self) -> int: ...
    @property
    def batch_first(self) -> bool: ...
    @property
    def bidirectional(self) -> bool: ...
    dropout: float
class LSTM(_Recurrent):
    """
    Multi-layer LSTM (PyTorch layout, gate order i, f, g, o and parameter names): lstm(x, (h0, c0)=None) -> (output, (h_n, c_n)).
    """
    def __init__(self, input_size: typing.SupportsInt | typing.SupportsIndex, hidden_size: typing.SupportsInt | typing.SupportsIndex, num_layers: typing.SupportsInt | typing.SupportsIndex = 1, bias: bool = True, batch_first: bool = False, dropout: typing.SupportsFloat | typing.SupportsIndex = 0.0, bidirectional: bool = False) -> None:
        ...
    def forward(self, input: Tensor, hx: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """
        (output, (h_n, c_n)) for input (L, N, H_in) ((N, L, H_in) with batch_first, or unbatched (L, H_in)).
        """
class GRU(_Recurrent):
    """
    Multi-layer GRU (PyTorch layout, gate order r, z, n and parameter names): gru(x, h0=None) -> (output, h_n).
    """
    def __init__(self, input_size: typing.SupportsInt | typing.SupportsIndex, hidden_size: typing.SupportsInt | typing.SupportsIndex, num_layers: typing.SupportsInt | typing.SupportsIndex = 1, bias: bool = True, batch_first: bool = False, dropout: typing.SupportsFloat | typing.SupportsIndex = 0.0, bidirectional: bool = False) -> None:
        ...
    def forward(self, input: Tensor, hx: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """
        (output, h_n) for input (L, N, H_in) ((N, L, H_in) with batch_first, or unbatched (L, H_in)).
        """
class Trend:
    """
    Statistics over a history of values (e.g. per-epoch losses).
    """
    def __init__(self, values: typing.Any = None) -> None:
        ...
    def __len__(self) -> int:
        ...
    def __repr__(self) -> str:
        ...
    def _repr_html_(self):
        ...
    def _repr_svg_(self):
        ...
    def append(self, value: typing.SupportsFloat | typing.SupportsIndex) -> None:
        """
        Adds one value at the end.
        """
    def converged(self, window: typing.SupportsInt | typing.SupportsIndex, tol: typing.SupportsFloat | typing.SupportsIndex) -> bool:
        """
        Population variance < tol over the window.
        """
    def improving(self, window: typing.SupportsInt | typing.SupportsIndex = 0) -> bool:
        """
        slope < 0 over the window.
        """
    def last(self, n: typing.SupportsInt | typing.SupportsIndex) -> list[float]:
        """
        The last n values.
        """
    def latest(self) -> float:
        """
        The newest value (0 when empty).
        """
    def max(self) -> float:
        """
        Largest value (0 when empty).
        """
    def mean(self) -> float:
        """
        Mean value (0 when empty).
        """
    def min(self) -> float:
        """
        Smallest value (0 when empty).
        """
    def slope(self, window: typing.SupportsInt | typing.SupportsIndex = 0) -> float:
        """
        Least-squares slope over the last `window` values (<= 0: all); 0 with fewer than 2.
        """
    def stalled(self, window: typing.SupportsInt | typing.SupportsIndex, tol: typing.SupportsFloat | typing.SupportsIndex) -> bool:
        """
        |slope| < tol over the window (False with fewer than 2 values).
        """
    def values(self) -> list[float]:
        """
        All values, oldest first.
        """
class TrendGroup:
    """
    Questions over several trends at once.
    """
    def __getitem__(self, arg0: typing.SupportsInt | typing.SupportsIndex) -> Trend:
        ...
    def __init__(self, trends: collections.abc.Sequence[Trend]) -> None:
        ...
    def __len__(self) -> int:
        ...
    def _repr_html_(self):
        ...
    def _repr_svg_(self):
        ...
    def all_converged(self, window: typing.SupportsInt | typing.SupportsIndex, tol: typing.SupportsFloat | typing.SupportsIndex) -> bool:
        """
        Every trend converged (False when empty).
        """
    def all_improving(self, window: typing.SupportsInt | typing.SupportsIndex = 0) -> bool:
        """
        Every trend improving (False when empty).
        """
    def all_stalled(self, window: typing.SupportsInt | typing.SupportsIndex, tol: typing.SupportsFloat | typing.SupportsIndex) -> bool:
        """
        Every trend stalled (False when empty).
        """
    def any_converged(self, window: typing.SupportsInt | typing.SupportsIndex, tol: typing.SupportsFloat | typing.SupportsIndex) -> bool:
        """
        Some trend converged.
        """
    def any_improving(self, window: typing.SupportsInt | typing.SupportsIndex = 0) -> bool:
        """
        Some trend improving.
        """
    def any_stalled(self, window: typing.SupportsInt | typing.SupportsIndex, tol: typing.SupportsFloat | typing.SupportsIndex) -> bool:
        """
        Some trend stalled.
        """
    def mean_slope(self, window: typing.SupportsInt | typing.SupportsIndex = 0) -> float:
        """
        Mean of the slopes (0 when empty).
        """
    def slopes(self, window: typing.SupportsInt | typing.SupportsIndex = 0) -> list[float]:
        """
        Each trend's slope.
        """
class Graph(Module):
    """
    A built flow: a Module whose tagged values can be observed, trended, profiled and drawn; it pickles and deep-copies.
    """
    def _observation_state(self) -> dict:
        ...
    def _recurrent_state(self) -> dict[str, Tensor]:
        ...
    def _repr_html_(self, *args, **kwargs) -> typing.Any:
        """
        Jupyter: the graph as SVG, or its DOT text without Graphviz.
        """
    def _repr_svg_(self, *args, **kwargs) -> typing.Any:
        """
        Jupyter: the graph as SVG (None without Graphviz).
        """
    def _restore_observation(self, arg0: dict) -> None:
        ...
    def _restore_timings(self, arg0: dict) -> None:
        ...
    def _set_recurrent_state(self, arg0: str, arg1: Tensor) -> None:
        ...
    def _timing_state(self) -> dict:
        ...
    def collect(self, *args) -> None:
        """
        Adds the last forward's tagged values (their means) to the batch buffers; stays in C++.
        """
    def collect_timings(self, *args) -> None:
        """
        Adds the tagged nodes' last timings to the timing batch buffers (none: every tag).
        """
    def collected(self, tag: str) -> list[float]:
        """
        The values collected for tag since the last flush.
        """
    def detach_state(self) -> None:
        """
        Cuts the recurrent state from the autograd graph of earlier calls (truncated BPTT).
        """
    def disable_profiling(self) -> None:
        """
        Stops timing (zero cost).
        """
    def dot(self) -> str:
        """
        The graph in Graphviz DOT.
        """
    def dot_with_profile(self) -> str:
        """
        DOT with each node's last timing, slower nodes redder.
        """
    def elapsed(self) -> float:
        """
        Seconds since the first forward, collect, record or flush.
        """
    def enable_profiling(self) -> None:
        """
        Times every node of each forward.
        """
    def eta(self, total_epochs: typing.SupportsInt | typing.SupportsIndex) -> float:
        """
        Estimated seconds left: mean epoch time times the epochs still to run.
        """
    def export_timing_trends(self, path: typing.Any, *args) -> None:
        """
        Writes the timing histories as CSV.
        """
    def export_trends(self, path: typing.Any, *args) -> None:
        """
        Writes the histories as CSV: epoch, then one column per tag.
        """
    def flush(self, *args, reduce: str = 'none') -> dict:
        """
        Ends an epoch: each tag's batch mean joins its history; returns {tag: mean}. reduce='mean' averages over the ranks of fg.distributed (every rank must flush the same tags).
        """
    def flush_timings(self, *args) -> dict:
        """
        Ends an epoch of timings; returns {tag: mean seconds}.
        """
    def forward(self, *args, timeout: typing.SupportsFloat | typing.SupportsIndex | None = None) -> typing.Any:
        """
        Runs the graph on (x, *extra inputs). timeout: seconds, checked between levels and loop iterations (TimeoutError).
        """
    def freeze(self, *args) -> None:
        """
        Stops gradients to the tagged nodes' parameters (no tags: all); optimizers then leave them unchanged.
        """
    def last_flush_duration(self) -> float:
        """
        Seconds the last epoch took (between the last two flushes).
        """
    def log(self, *args, total_epochs: typing.SupportsInt | typing.SupportsIndex = 0, every: typing.SupportsInt | typing.SupportsIndex = 0) -> None:
        """
        After each flush, prints (or passes to on_log callbacks) a line with these tags' epoch values; every=N also gives a progress line every N steps (collect/record calls) with the running means.
        """
    def on_flush(self, fn: collections.abc.Callable[[dict], None]) -> None:
        """
        fn({tag: mean}) runs after each flush.
        """
    def on_log(self, fn: collections.abc.Callable[[str], None]) -> None:
        """
        fn(line) receives each log line instead of print.
        """
    def on_profile(self, fn: collections.abc.Callable[[dict], None]) -> None:
        """
        fn(profile) runs after each profiled forward.
        """
    def parameters_by_tag(self, tag: str) -> list:
        """
        The parameters of the tagged node (or of every tag of a group).
        """
    def plot_html(self, *args, **kwargs) -> typing.Any:
        """
        Writes a self-contained HTML chart of the tags' histories (plot_html(path, *tags)): axes, legend, log-scale toggle, no network needed.
        """
    def plot_timings_html(self, *args, **kwargs) -> typing.Any:
        """
        Writes an HTML chart of the per-epoch timing histories (plot_timings_html(path, *tags)).
        """
    def profile(self) -> dict:
        """
        The last profiled forward: total, per-level wall times, per-node seconds, parallelism achieved.
        """
    def record(self, tag: str, *args) -> None:
        """
        Adds values (numbers or tensors, by their mean) to a tag's batch buffer.
        """
    def reset_state(self) -> None:
        """
        Clears recurrent state: the next call starts from zeros.
        """
    def reset_trend(self, *args) -> None:
        """
        Forgets the history of tags (none: everything, flush count and clock included).
        """
    def sub(self, tag: str) -> Module:
        """
        The module of the tagged node (a nested Graph stays observable).
        """
    def svg(self, *args, **kwargs) -> typing.Any:
        """
        The graph drawn as SVG by Graphviz's `dot` (written to path when given); FlowgradError without dot.
        """
    def svg_with_profile(self, *args, **kwargs) -> typing.Any:
        """
        Like svg(), annotated with each node's last profiled time.
        """
    def tag_group(self, name: str) -> list[str]:
        """
        The tags of a tag group (empty when no such group).
        """
    def tagged(self, tag: str) -> Tensor:
        """
        The tagged value of the last forward (detached).
        """
    def timing(self, tag: str) -> float:
        """
        Seconds the tagged node took in the last profiled forward.
        """
    def timing_trend(self, tag: str) -> Trend:
        """
        The tag's per-epoch timing history.
        """
    def timing_trends(self, *args) -> TrendGroup:
        """
        Timing trends of several tags (none: all).
        """
    def traces(self, tag: str) -> list[Tensor]:
        """
        Per-iteration outputs of the tagged loop in the last forward.
        """
    def trend(self, tag: str) -> Trend:
        """
        The tag's per-epoch history as a Trend.
        """
    def trends(self, *args) -> TrendGroup:
        """
        Trends of several tags (tag groups expand; none: every observed tag).
        """
    def unfreeze(self, *args) -> None:
        """
        Undoes freeze for the tagged nodes (no tags: all).
        """
    def write_log(self, path: typing.Any, total_epochs: typing.SupportsInt | typing.SupportsIndex = 0, *args) -> None:
        """
        Writes one line per epoch with values, duration and ETA.
        """
    def zero_frozen_grads(self) -> None:
        """
        Drops any gradient held by frozen parameters.
        """
    @property
    def flush_count(self) -> int:
        """
        How many times flush ran.
        """
    @property
    def input_names(self) -> list[str]:
        """
        The graph inputs: 'input' then each input(name).
        """
    @property
    def levels(self) -> list[list[int]]:
        """
        Node indices per topological level; nodes of one level may run concurrently.
        """
    @property
    def parallel(self) -> bool:
        """
        Run independent nodes of a level concurrently on the CPU pool (default True).
        """
    @parallel.setter
    def parallel(self, arg1: bool) -> None:
        ...
    @property
    def profiling(self) -> bool:
        """
        Whether profiling is on.
        """
    @property
    def tags(self) -> list[str]:
        """
        The node tags, in flow order.
        """
class FlowBuilder:
    """
    Builds a Graph as data flow: FlowBuilder(encoder).through(block).tag('h')...build(). fg.flow(module) is the same; FlowBuilder() starts from the graph input itself.
    """
    def __init__(self, module: typing.Any = None) -> None:
        ...
    def also(self, module: typing.Any) -> FlowBuilder:
        """
        Residual: out = x + module(x).
        """
    def batched(self) -> FlowBuilder:
        """
        Calls the map body once on all elements at once.
        """
    def build(self) -> Graph:
        """
        Validates the flow and returns the Graph (GraphError names the problem).
        """
    def each(self) -> FlowBuilder:
        """
        Maps over dim 0 of the stream and stacks the results.
        """
    def for_(self, n: typing.SupportsInt | typing.SupportsIndex) -> FlowBuilder:
        """
        Runs the loop body n times.
        """
    def gate(self, router: typing.Any, *args) -> FlowBuilder:
        """
        Soft routing: router(x) gives weights [..., n]; out = sum_i w[..., i] * expert_i(x).
        """
    def input(self, name: str) -> FlowBuilder:
        """
        Declares an extra graph input (passed after x, in declaration order), usable with using(name).
        """
    def loop(self, body: typing.Any) -> FlowBuilder:
        """
        Repeats body; finish with .for_(n), .while_(halt, max_iter) or .until(halt, max_iter).
        """
    def map(self, body: typing.Any) -> FlowBuilder:
        """
        Applies body per element; finish with [.batched()] .each(), .over(tag) or .slices(n).
        """
    def merge(self, module: typing.Any) -> FlowBuilder:
        """
        Joins the open split's branches: module(*branch_outputs).
        """
    def over(self, tag: str) -> FlowBuilder:
        """
        Maps over dim 0 of a tagged value instead of the stream.
        """
    def slices(self, n: typing.SupportsInt | typing.SupportsIndex) -> FlowBuilder:
        """
        Splits the last dim into n equal slices, maps each, concatenates the results.
        """
    def split(self, *args) -> FlowBuilder:
        """
        Runs the stream through several branches (concurrently where they are independent).
        """
    def switch(self, selector: typing.Any, *args) -> FlowBuilder:
        """
        Hard routing: selector(x) gives a branch index; only that branch runs (and gets gradients).
        """
    def tag(self, name: str) -> FlowBuilder:
        """
        Names the last node's output: for using(), observation (collect/trend) and sub().
        """
    def tag_group(self, name: str) -> FlowBuilder:
        """
        Tags the branches of an open split name_0, name_1, ...; trends(name) expands to them.
        """
    def through(self, module: typing.Any) -> FlowBuilder:
        """
        Passes the stream through a module.
        """
    def until(self, halt: typing.Any, max_iter: typing.SupportsInt | typing.SupportsIndex) -> FlowBuilder:
        """
        Runs the body until halt(x) > 0, checked after each iteration (runs at least once).
        """
    def using(self, *args) -> FlowBuilder:
        """
        Feeds tagged values to the last node's module as extra positional inputs. A tag defined later becomes recurrent state (zeros on the first call).
        """
    def while_(self, halt: typing.Any, max_iter: typing.SupportsInt | typing.SupportsIndex) -> FlowBuilder:
        """
        Runs the body while halt(x) <= 0, checked before each iteration (may run zero times).
        """
def _debug_level() -> int:
    """
    FLOWGRAD_DEBUG.
    """
def _is_parameter(arg0: Tensor) -> bool:
    """
    Whether t was made by fg.nn.Parameter.
    """
def _load(path: str) -> tuple:
    """
    Reads a safetensors file: (tensors dict, metadata dict); CheckpointError on any fault.
    """
def _op_registry() -> list:
    """
    Every registered op with its rule, kernels, backward and flags (for tests and tools).
    """
def _parameter(data: Tensor, requires_grad: bool = True) -> Tensor:
    """
    A parameter sharing t's data.
    """
def _parse_safetensors(data: bytes) -> tuple:
    """
    Parses safetensors bytes held in memory (used by the fuzz harness).
    """
def _save(tensors: dict, path: str, metadata: typing.Any = None) -> None:
    """
    Writes tensors (and string metadata) to a safetensors file atomically.
    """
def _serialize_safetensors(tensors: dict, metadata: typing.Any = None) -> bytes:
    """
    safetensors bytes for tensors.
    """
def abs(input: Tensor) -> Tensor:
    """
    Elementwise abs(x).
    """
def add(input: typing.Any, other: typing.Any) -> Tensor:
    """
    Elementwise add(input, other) with NumPy broadcasting.
    """
def amax(input: Tensor, dim: typing.Any = None, keepdim: bool = False) -> Tensor:
    """
    amax over dim (None: every dim); keepdim keeps reduced dims as 1.
    """
def amin(input: Tensor, dim: typing.Any = None, keepdim: bool = False) -> Tensor:
    """
    amin over dim (None: every dim); keepdim keeps reduced dims as 1.
    """
def arange(start: typing.Any, end: typing.Any = None, step: typing.Any = 1, *, dtype: typing.Any = None, device: typing.Any = None, requires_grad: bool = False) -> Tensor:
    """
    Values start, start+step, ... below end (int64 for integer arguments, else float32).
    """
def argmax(input: Tensor, dim: typing.SupportsInt | typing.SupportsIndex | None = None, keepdim: bool = False) -> Tensor:
    """
    Index of the first maximum (over the flattened tensor when dim is None).
    """
def argmin(input: Tensor, dim: typing.SupportsInt | typing.SupportsIndex | None = None, keepdim: bool = False) -> Tensor:
    """
    Index of the first minimum (over the flattened tensor when dim is None).
    """
def argsort(input: Tensor, dim: typing.SupportsInt | typing.SupportsIndex = -1, descending: bool = False) -> Tensor:
    """
    Indices that sort along dim.
    """
def build_config() -> dict:
    """
    How this build was configured: the FLOWGRAD_CUDA setting asked for, whether CUDA was compiled, the BLAS (its name, the FLOWGRAD_BLAS setting, the library file, and OpenBLAS's CPU core and build string).
    """
def blas_name() -> str:
    """
    The BLAS library matmul calls ('none': the built-in blocked kernel).
    """
def bitwise_and(input: typing.Any, other: typing.Any) -> Tensor:
    """
    Elementwise bitwise_and(input, other) with NumPy broadcasting.
    """
def bitwise_or(input: typing.Any, other: typing.Any) -> Tensor:
    """
    Elementwise bitwise_or(input, other) with NumPy broadcasting.
    """
def bitwise_xor(input: typing.Any, other: typing.Any) -> Tensor:
    """
    Elementwise bitwise_xor(input, other) with NumPy broadcasting.
    """
def logical_and(input: typing.Any, other: typing.Any) -> Tensor:
    """
    Elementwise logical_and(input, other) with NumPy broadcasting.
    """
def logical_or(input: typing.Any, other: typing.Any) -> Tensor:
    """
    Elementwise logical_or(input, other) with NumPy broadcasting.
    """
def logical_xor(input: typing.Any, other: typing.Any) -> Tensor:
    """
    Elementwise logical_xor(input, other) with NumPy broadcasting.
    """
def bitwise_not(input: Tensor) -> Tensor:
    """
    Elementwise bitwise_not(x).
    """
def logical_not(input: Tensor) -> Tensor:
    """
    Elementwise logical_not(x).
    """
def broadcast_to(input: Tensor, shape: typing.Any) -> Tensor:
    """
    A broadcast view with the given shape.
    """
def cat(tensors: collections.abc.Sequence[Tensor], dim: typing.SupportsInt | typing.SupportsIndex = 0) -> Tensor:
    """
    Concatenates tensors along an existing dim.
    """
def chunk(input: Tensor, chunks: typing.SupportsInt | typing.SupportsIndex, dim: typing.SupportsInt | typing.SupportsIndex = 0) -> list[Tensor]:
    """
    Splits into `chunks` nearly equal views.
    """
def clamp(input: Tensor, min: typing.SupportsFloat | typing.SupportsIndex | None = None, max: typing.SupportsFloat | typing.SupportsIndex | None = None) -> Tensor:
    """
    Limits values to [min, max]; either bound may be None.
    """
def contiguous(input: Tensor) -> Tensor:
    """
    A row-major copy, or self when already so.
    """
def cos(input: Tensor) -> Tensor:
    """
    Elementwise cos(x).
    """
def cpu_empty_cache() -> None:
    """
    Returns cached CPU blocks to the system.
    """
def cpu_memory_stats() -> dict:
    """
    Bytes held by the CPU allocator: allocated (live), peak_allocated, cached (free for reuse).
    """
def div(input: typing.Any, other: typing.Any) -> Tensor:
    """
    Elementwise div(input, other) with NumPy broadcasting.
    """
def empty(*args, dtype: typing.Any = None, device: typing.Any = None, requires_grad: bool = False) -> Tensor:
    """
    A tensor with uninitialised values.
    """
def eq(input: typing.Any, other: typing.Any) -> Tensor:
    """
    Elementwise eq(input, other) with NumPy broadcasting.
    """
def erf(input: Tensor) -> Tensor:
    """
    Elementwise erf(x).
    """
def exp(input: Tensor) -> Tensor:
    """
    Elementwise exp(x).
    """
def expand(input: Tensor, *args) -> Tensor:
    """
    A broadcast view (-1 keeps a dim).
    """
def eye(n: typing.SupportsInt | typing.SupportsIndex, m: typing.SupportsInt | typing.SupportsIndex | None = None, *, dtype: typing.Any = None, device: typing.Any = None, requires_grad: bool = False) -> Tensor:
    """
    The identity matrix (n x m).
    """
def flatten(input: Tensor, start_dim: typing.SupportsInt | typing.SupportsIndex = 0, end_dim: typing.SupportsInt | typing.SupportsIndex = -1) -> Tensor:
    """
    Merges dims start_dim..end_dim into one.
    """
def flip(input: Tensor, dims: typing.Any) -> Tensor:
    """
    Reverses the order along the given dims.
    """
def format_duration(seconds: typing.SupportsFloat | typing.SupportsIndex) -> str:
    """
    Human duration: '220us', '42ms', '1.2s', '2m05s', '1h02m'.
    """
def from_dlpack(obj: typing.Any) -> Tensor:
    """
    A tensor sharing the memory of any object that implements __dlpack__. A capsule marked read-only gives a read-only tensor, as from_numpy does.
    """
def from_numpy(array: numpy.ndarray) -> Tensor:
    """
    A tensor sharing the NumPy array's memory (no copy; keeps the array alive). A read-only array (np.frombuffer of bytes, a read-only mmap, writeable=False) gives a read-only tensor: reading it and out-of-place ops work, in-place writes raise InvalidArgumentError; fg.tensor(a) copies into a writable tensor.
    """
def full(shape: typing.Any, fill_value: typing.Any, *, dtype: typing.Any = None, device: typing.Any = None, requires_grad: bool = False) -> Tensor:
    """
    A tensor filled with a value; the dtype follows the value (float32, int64, bool) by default.
    """
def gather(input: Tensor, dim: typing.SupportsInt | typing.SupportsIndex, index: Tensor) -> Tensor:
    """
    out[i][j] = input[index[i][j]][j] (for dim 0); index matches input except in dim.
    """
def ge(input: typing.Any, other: typing.Any) -> Tensor:
    """
    Elementwise ge(input, other) with NumPy broadcasting.
    """
def gelu(input: Tensor, approximate: str = 'none') -> Tensor:
    """
    GELU, exact (erf) or tanh-approximated.
    """
def get_default_dtype() -> dtype:
    """
    The default float dtype (float32 unless set).
    """
def kthvalue(input: Tensor, k: typing.SupportsInt | typing.SupportsIndex, dim: typing.SupportsInt | typing.SupportsIndex = -1, keepdim: bool = False) -> typing.Any:
    """
    Named tuple (values, indices) of the k-th smallest entry along dim (k counts from 1).
    """
def get_num_threads() -> int:
    """
    Threads used by CPU kernels and BLAS.
    """
def get_rng_state() -> tuple[int, int]:
    """
    (seed, offset) of the global generator.
    """
def grad(outputs: collections.abc.Sequence[Tensor], inputs: collections.abc.Sequence[Tensor], grad_outputs: typing.Any = None, retain_graph: bool = False, create_graph: bool = False, allow_unused: bool = False) -> list:
    """
    Gradients of outputs with respect to inputs, without touching .grad.
    """
def gt(input: typing.Any, other: typing.Any) -> Tensor:
    """
    Elementwise gt(input, other) with NumPy broadcasting.
    """
def index_add(input: Tensor, dim: typing.SupportsInt | typing.SupportsIndex, index: Tensor, src: Tensor) -> Tensor:
    """
    A copy of input with src's slices added at a 1-D index along dim (repeats accumulate).
    """
def index_select(input: Tensor, dim: typing.SupportsInt | typing.SupportsIndex, index: Tensor) -> Tensor:
    """
    Entries of input at a 1-D index along dim.
    """
def is_anomaly_enabled() -> bool:
    """
    Whether anomaly detection is on.
    """
def is_grad_enabled() -> bool:
    """
    Whether ops record autograd history on this thread.
    """
def le(input: typing.Any, other: typing.Any) -> Tensor:
    """
    Elementwise le(input, other) with NumPy broadcasting.
    """
def linspace(start: typing.SupportsFloat | typing.SupportsIndex, end: typing.SupportsFloat | typing.SupportsIndex, steps: typing.SupportsInt | typing.SupportsIndex, *, dtype: typing.Any = None, device: typing.Any = None, requires_grad: bool = False) -> Tensor:
    """
    `steps` evenly spaced values from start to end.
    """
def log(input: Tensor) -> Tensor:
    """
    Elementwise log(x).
    """
def logsumexp(input: Tensor, dim: typing.Any = None, keepdim: bool = False) -> Tensor:
    """
    logsumexp over dim (None: every dim); keepdim keeps reduced dims as 1.
    """
def lt(input: typing.Any, other: typing.Any) -> Tensor:
    """
    Elementwise lt(input, other) with NumPy broadcasting.
    """
def manual_seed(seed: typing.SupportsInt | typing.SupportsIndex) -> None:
    """
    Seeds the global Philox generator: the same seed gives the same random tensors.
    """
def masked_fill(input: Tensor, mask: Tensor, value: typing.SupportsFloat | typing.SupportsIndex) -> Tensor:
    """
    A copy of input with value where mask is True.
    """
def matmul(input: Tensor, other: typing.Any) -> Tensor:
    """
    Matrix product with NumPy's matmul semantics.
    """
def max(input: Tensor, dim: typing.Any = None, keepdim: bool = False) -> typing.Any:
    """
    max over dim. An int dim gives a named tuple (values, indices) (fg.return_types.max); None or a tuple of dims gives the values; a tensor gives the elementwise maximum.
    """
def maximum(input: typing.Any, other: typing.Any) -> Tensor:
    """
    Elementwise maximum(input, other) with NumPy broadcasting.
    """
def mean(input: Tensor, dim: typing.Any = None, keepdim: bool = False) -> Tensor:
    """
    mean over dim (None: every dim); keepdim keeps reduced dims as 1.
    """
def min(input: Tensor, dim: typing.Any = None, keepdim: bool = False) -> typing.Any:
    """
    min over dim. An int dim gives a named tuple (values, indices) (fg.return_types.min); None or a tuple of dims gives the values; a tensor gives the elementwise minimum.
    """
def minimum(input: typing.Any, other: typing.Any) -> Tensor:
    """
    Elementwise minimum(input, other) with NumPy broadcasting.
    """
def mul(input: typing.Any, other: typing.Any) -> Tensor:
    """
    Elementwise mul(input, other) with NumPy broadcasting.
    """
def narrow(input: Tensor, dim: typing.SupportsInt | typing.SupportsIndex, start: typing.SupportsInt | typing.SupportsIndex, length: typing.SupportsInt | typing.SupportsIndex) -> Tensor:
    """
    A view of `length` entries from `start` along dim.
    """
def ne(input: typing.Any, other: typing.Any) -> Tensor:
    """
    Elementwise ne(input, other) with NumPy broadcasting.
    """
def neg(input: Tensor) -> Tensor:
    """
    Elementwise neg(x).
    """
def nonzero(input: Tensor) -> Tensor:
    """
    Coordinates of the True elements, (count, ndim).
    """
def one_hot(index: Tensor, num_classes: typing.SupportsInt | typing.SupportsIndex) -> Tensor:
    """
    int64 one-hot encoding with a new last dim of num_classes.
    """
def ones(*args, dtype: typing.Any = None, device: typing.Any = None, requires_grad: bool = False) -> Tensor:
    """
    A tensor of ones.
    """
def pad(input: Tensor, pad: typing.Any, value: typing.SupportsFloat | typing.SupportsIndex = 0.0) -> Tensor:
    """
    Constant padding; (left, right) pairs starting from the last dim.
    """
def permute(input: Tensor, *args) -> Tensor:
    """
    A view with the dims reordered.
    """
def pow(input: typing.Any, other: typing.Any) -> Tensor:
    """
    Elementwise pow(input, other) with NumPy broadcasting.
    """
def promote_types(a: numpy.dtype[typing.Any], b: numpy.dtype[typing.Any]) -> numpy.dtype[typing.Any]:
    """
    The dtype NumPy's promotion rules give for an op on a and b.
    """
def rand(*args, dtype: typing.Any = None, device: typing.Any = None, requires_grad: bool = False) -> Tensor:
    """
    Uniform samples in [0, 1) (Philox; fixed by fg.manual_seed).
    """
def randint(low: typing.SupportsInt | typing.SupportsIndex, high: typing.Any = None, size: typing.Any = (), *, dtype: typing.Any = None, device: typing.Any = None) -> Tensor:
    """
    Uniform integers in [low, high).
    """
def randn(*args, dtype: typing.Any = None, device: typing.Any = None, requires_grad: bool = False) -> Tensor:
    """
    Standard normal samples (Philox; fixed by fg.manual_seed).
    """
def randperm(n: typing.SupportsInt | typing.SupportsIndex, *, seed: typing.SupportsInt | typing.SupportsIndex | None = None, offset: typing.SupportsInt | typing.SupportsIndex = 0, device: typing.Any = None) -> Tensor:
    """
    A random permutation of 0..n-1 (int64); with seed it depends on (seed, offset) only.
    """
def relu(input: Tensor) -> Tensor:
    """
    Elementwise relu(x).
    """
def repeat(input: Tensor, *args) -> Tensor:
    """
    Tiles the tensor (like numpy.tile).
    """
def reshape(input: Tensor, *args) -> Tensor:
    """
    The same elements in a new shape (a view when possible; one -1 allowed).
    """
def rsqrt(input: Tensor) -> Tensor:
    """
    Elementwise rsqrt(x).
    """
def scatter_add(input: Tensor, dim: typing.SupportsInt | typing.SupportsIndex, index: Tensor, src: Tensor) -> Tensor:
    """
    A copy of input with src added at index along dim.
    """
def set_default_dtype(dtype: dtype) -> None:
    """
    Sets the float dtype (float32 or float64) of Python floats, float creation functions and integer true division, mean, exp, ... (PyTorch's default dtype).
    """
def set_anomaly_enabled(enabled: bool) -> None:
    """
    Checks every op output and gradient for NaN/Inf and names the first op that makes one.
    """
def set_grad_enabled(enabled: bool) -> None:
    """
    Turns recording on or off for this thread.
    """
def set_num_threads(n: typing.SupportsInt | typing.SupportsIndex) -> None:
    """
    Sets the threads used by CPU kernels and BLAS.
    """
def set_rng_state(state: tuple) -> None:
    """
    Restores a state from get_rng_state().
    """
def sigmoid(input: Tensor) -> Tensor:
    """
    Elementwise sigmoid(x).
    """
def sign(input: Tensor) -> Tensor:
    """
    Elementwise sign(x).
    """
def silu(input: Tensor) -> Tensor:
    """
    Elementwise silu(x).
    """
def sin(input: Tensor) -> Tensor:
    """
    Elementwise sin(x).
    """
def softplus(input: Tensor) -> Tensor:
    """
    Elementwise softplus(x).
    """
def sort(input: Tensor, dim: typing.SupportsInt | typing.SupportsIndex = -1, descending: bool = False) -> typing.Any:
    """
    Named tuple (values, indices) sorted along dim (stable; NaN last).
    """
def split(input: Tensor, split_size_or_sections: typing.Any, dim: typing.SupportsInt | typing.SupportsIndex = 0) -> list[Tensor]:
    """
    Views of equal-size pieces (int) or of the given sizes (list).
    """
def sqrt(input: Tensor) -> Tensor:
    """
    Elementwise sqrt(x).
    """
def square(input: Tensor) -> Tensor:
    """
    Elementwise square(x).
    """
def squeeze(input: Tensor, dim: typing.SupportsInt | typing.SupportsIndex | None = None) -> Tensor:
    """
    Removes size-1 dims (all, or the one given).
    """
def stack(tensors: collections.abc.Sequence[Tensor], dim: typing.SupportsInt | typing.SupportsIndex = 0) -> Tensor:
    """
    Stacks equal-shaped tensors along a new dim.
    """
def std(input: Tensor, dim: typing.Any = None, keepdim: bool = False, correction: typing.SupportsFloat | typing.SupportsIndex = 1.0) -> Tensor:
    """
    Standard deviation with divisor N - correction.
    """
def sub(input: typing.Any, other: typing.Any) -> Tensor:
    """
    Elementwise sub(input, other) with NumPy broadcasting.
    """
def sum(input: Tensor, dim: typing.Any = None, keepdim: bool = False) -> Tensor:
    """
    sum over dim (None: every dim); keepdim keeps reduced dims as 1.
    """
def t(input: Tensor) -> Tensor:
    """
    Transpose of a 2-D tensor.
    """
def tanh(input: Tensor) -> Tensor:
    """
    Elementwise tanh(x).
    """
def tensor(data: typing.Any, dtype: typing.Any = None, device: typing.Any = None, requires_grad: bool = False) -> Tensor:
    """
    A new tensor copied from a list, scalar, NumPy array or tensor. Python floats give the default float dtype (float32 unless fg.set_default_dtype).
    """
def topk(input: Tensor, k: typing.SupportsInt | typing.SupportsIndex, dim: typing.SupportsInt | typing.SupportsIndex = -1, largest: bool = True) -> typing.Any:
def clone(input: Tensor) -> Tensor:
    """
    A copy with its own memory; gradients flow back to input.
def topk(input: Tensor, k: typing.SupportsInt | typing.SupportsIndex, dim: typing.SupportsInt | typing.SupportsIndex = -1, largest: bool = True) -> tuple:
    """
    Named tuple (values, indices) of the k largest (or smallest) entries along dim, sorted.
    """
def transpose(input: Tensor, dim0: typing.SupportsInt | typing.SupportsIndex, dim1: typing.SupportsInt | typing.SupportsIndex) -> Tensor:
    """
    A view with two dims swapped.
    """
def unsqueeze(input: Tensor, dim: typing.SupportsInt | typing.SupportsIndex) -> Tensor:
    """
    Inserts a size-1 dim.
    """
def var(input: Tensor, dim: typing.Any = None, keepdim: bool = False, correction: typing.SupportsFloat | typing.SupportsIndex = 1.0) -> Tensor:
    """
    Variance with divisor N - correction.
    """
def where(condition: Tensor, input: typing.Any, other: typing.Any) -> Tensor:
    """
    Elementwise choice: input where condition is True, else other (broadcast).
    """
def zeros(*args, dtype: typing.Any = None, device: typing.Any = None, requires_grad: bool = False) -> Tensor:
    """
    A tensor of zeros: fg.zeros(2, 3) or fg.zeros((2, 3)).
    """
bfloat16: dtype
bool: dtype
float16: dtype
float32: dtype
float64: dtype
int16: dtype
int32: dtype
int64: dtype
int8: dtype
uint8: dtype
