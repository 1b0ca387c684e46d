"""fg.backends: the switches PyTorch scripts set on their way (torch.backends.*).

cuda.matmul.allow_tf32 is flowgrad's TF32 switch (fg.cuda.set_allow_tf32). flowgrad has no
cuDNN and no MPS: cudnn.is_available() and mps.is_available() are False, and cudnn's enabled /
benchmark / deterministic flags are kept for scripts that set them but change nothing (flowgrad's
convolutions take one fixed path per shape and instruction-set level, chosen without benchmarking,
and run the same way every time)."""
from . import cuda as _cuda

__all__ = ["cuda", "cudnn", "mps"]


class _Matmul:
    @property
    def allow_tf32(self):
        """Whether float32 CUDA matmuls may use TF32 tensor cores."""
        return _cuda.allow_tf32()

    @allow_tf32.setter
    def allow_tf32(self, on):
        _cuda.set_allow_tf32(on)


class _Cuda:
    matmul = _Matmul()

    @staticmethod
    def is_built():
        """Whether this build compiled the CUDA kernels."""
        return _cuda.built_with_cuda()


class _Cudnn:
    enabled = True
    benchmark = False
    deterministic = False
    allow_tf32 = True

    @staticmethod
    def is_available():
        """False: flowgrad does not use cuDNN."""
        return False


class _Mps:
    @staticmethod
    def is_available():
        """False: flowgrad runs on CPUs and CUDA GPUs."""
        return False

    @staticmethod
    def is_built():
        return False


cuda, cudnn, mps = _Cuda(), _Cudnn(), _Mps()
