"""Adamax, NAdam and RAdam: PyTorch's updates composed from in-place ops (see _Composed), so a
compiled step records them like eager code. Step-dependent factors (bias corrections, NAdam's
momentum schedule, RAdam's rectification) are computed from a float64 step tensor, which a
compiled step advances like eager code does, then cast to the parameter's dtype."""
from .. import _core
from . import _Composed, _invalid


class _AdamVariant(_Composed):
    _hyper_slots = ("lr", "beta1", "beta2", "eps", "weight_decay")
    _flags = ("foreach", "maximize", "capturable", "differentiable")

    def _validate(self, group):
        super()._validate(group)
        b1, b2 = group["betas"]
        if not (0 <= b1 < 1 and 0 <= b2 < 1) or group["eps"] < 0 or group["weight_decay"] < 0:
            raise _invalid(f"{type(self).__name__}: betas must be in [0, 1) and eps, weight_decay >= 0, got "
                           f"betas={group['betas']}, eps={group['eps']}, weight_decay={group['weight_decay']}")

    def _hyper_values(self, index, group):
        return [group["lr"], group["betas"][0], group["betas"][1], group["eps"], group["weight_decay"]]

    def _init_state(self, p, group):
        """Moments shaped like p; the step count (0) and NAdam's mu_product (1) as float64 scalars."""
        def start(key):
            if key in ("step", "mu_product"):
                return _core.full((), float(key == "mu_product"), dtype=_core.float64, device=p.device)
            return _core.zeros(*p.shape, dtype=p.dtype, device=p.device)
        return {key: start(key) for key in self._state_keys}

    @staticmethod
    def _moments(exp_avg, exp_avg_sq, g, h):
        exp_avg.mul_(h[1]).add_(g * (1 - h[1]))
        exp_avg_sq.mul_(h[2]).add_(g * g * (1 - h[2]))

    @staticmethod
    def _decay(p, g, h, group):
        """L2 decay added to the gradient, or decoupled (AdamW's: p *= 1 - lr * weight_decay)."""
        if group["weight_decay"] == 0:
            return g
        if group.get("decoupled_weight_decay"):
            p.mul_(1 - h[0] * h[4])
            return g
        return g + p * h[4]


class Adamax(_AdamVariant):
    """Adamax (Kingma & Ba, Adam with the infinity norm), PyTorch's form: exp_avg = beta1 * exp_avg
    + (1 - beta1) * g, exp_inf = max(beta2 * exp_inf, |g| + eps), p -= lr / (1 - beta1^step) *
    exp_avg / exp_inf; L2 weight decay added to g."""

    _state_keys = ("exp_avg", "exp_inf", "step")

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, foreach=None, **flags):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay),
                         foreach=foreach, **flags)

    def _apply(self, p, g, state, h64, h, group):
        exp_avg, exp_inf, step = state
        step.add_(1)
        g = self._decay(p, g, h, group)
        exp_avg.mul_(h[1]).add_(g * (1 - h[1]))  # Adam's first moment; the second is the infinity norm
        exp_inf.copy_(_core.maximum(exp_inf * h[2], g.abs() + h[3]))
        clr = (h64[0] / (1 - h64[1] ** step)).to(dtype=p.dtype)
        p.sub_(exp_avg / exp_inf * clr)


class NAdam(_AdamVariant):
    """NAdam (Dozat, Adam with Nesterov momentum), PyTorch's form: mu_t = beta1 * (1 - 0.5 *
    0.96^(t * momentum_decay)), mu_product = prod mu_1..t, and with denom = sqrt(exp_avg_sq /
    (1 - beta2^t)) + eps: p -= lr * (1 - mu_t) / (1 - mu_product) * g / denom + lr * mu_{t+1} /
    (1 - mu_product * mu_{t+1}) * exp_avg / denom. Weight decay is L2 (added to g), or decoupled
    (p *= 1 - lr * weight_decay) with decoupled_weight_decay=True."""

    _state_keys = ("exp_avg", "exp_avg_sq", "mu_product", "step")
    _hyper_slots = _AdamVariant._hyper_slots + ("momentum_decay",)

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, momentum_decay=4e-3,
                 decoupled_weight_decay=False, foreach=None, **flags):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      momentum_decay=momentum_decay, decoupled_weight_decay=decoupled_weight_decay),
                         foreach=foreach, **flags)

    def _validate(self, group):
        super()._validate(group)
        if group["momentum_decay"] < 0:
            raise _invalid(f"NAdam: momentum_decay must be >= 0, got {group['momentum_decay']}")

    def _layout(self, group):
        return (bool(group["decoupled_weight_decay"]),)

    def _hyper_values(self, index, group):
        return super()._hyper_values(index, group) + [group["momentum_decay"]]

    def _apply(self, p, g, state, h64, h, group):
        exp_avg, exp_avg_sq, mu_product, step = state
        step.add_(1)
        g = self._decay(p, g, h, group)
        beta1, decay = h64[1], h64[5]
        mu = beta1 * (1 - 0.5 * 0.96 ** (step * decay))
        mu_next = beta1 * (1 - 0.5 * 0.96 ** ((step + 1) * decay))
        mu_product.mul_(mu)
        self._moments(exp_avg, exp_avg_sq, g, h)
        denom = (exp_avg_sq / (1 - h64[2] ** step).to(dtype=p.dtype)).sqrt() + h[3]
        p.sub_(g / denom * (h64[0] * (1 - mu) / (1 - mu_product)).to(dtype=p.dtype))
        p.sub_(exp_avg / denom * (h64[0] * mu_next / (1 - mu_product * mu_next)).to(dtype=p.dtype))


class RAdam(_AdamVariant):
    """RAdam (Liu et al., rectified Adam), PyTorch's form: with rho_inf = 2 / (1 - beta2) - 1 and
    rho_t = rho_inf - 2 t beta2^t / (1 - beta2^t), the bias-corrected exp_avg is applied through
    Adam's adaptive rate times the rectification sqrt((rho_t - 4)(rho_t - 2) rho_inf / ((rho_inf -
    4)(rho_inf - 2) rho_t)) once rho_t > 5, and as plain momentum SGD before. Weight decay is L2,
    or decoupled with decoupled_weight_decay=True."""

    _state_keys = ("exp_avg", "exp_avg_sq", "step")

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 decoupled_weight_decay=False, foreach=None, **flags):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      decoupled_weight_decay=decoupled_weight_decay), foreach=foreach, **flags)

    def _layout(self, group):
        return (bool(group["decoupled_weight_decay"]),)

    def _apply(self, p, g, state, h64, h, group):
        exp_avg, exp_avg_sq, step = state
        step.add_(1)
        g = self._decay(p, g, h, group)
        self._moments(exp_avg, exp_avg_sq, g, h)
        beta2 = h64[2]
        correction2 = 1 - beta2 ** step
        rho_inf = 2 / (1 - beta2) - 1
        rho_t = rho_inf - 2 * step * beta2 ** step / correction2
        rho = _core.clamp(rho_t, min=5.0)  # the rectification's domain; unused while rho_t <= 5
        rect = ((rho - 4) * (rho - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho)).sqrt()
        adaptive = correction2.sqrt().to(dtype=p.dtype) / (exp_avg_sq.sqrt() + h[3]) * rect.to(dtype=p.dtype)
        factor = _core.where(rho_t > 5, adaptive, 1.0)
        p.sub_(exp_avg * factor * (h64[0] / (1 - h64[1] ** step)).to(dtype=p.dtype))
