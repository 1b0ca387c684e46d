"""A GPT language model in nanoGPT's idiom: token and position embeddings, the output head tied to
the token embedding, causal scaled_dot_product_attention, GELU MLP, weight-decay param groups
for AdamW, clip_grad_norm_, cross entropy over view(-1, V)."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

import compat_harness as h

V, T, C, HEADS, LAYERS = 50, 16, 32, 4, 2


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)

    def forward(self, x):
        B, T_, C_ = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T_, HEADS, C_ // HEADS).transpose(1, 2)
        k = k.view(B, T_, HEADS, C_ // HEADS).transpose(1, 2)
        v = v.view(B, T_, HEADS, C_ // HEADS).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T_, C_))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C)
        self.attn = Attention()
        self.ln_2 = nn.LayerNorm(C)
        self.mlp = nn.Sequential(nn.Linear(C, 4 * C), nn.GELU(), nn.Linear(4 * C, C))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.h = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.ln_f = nn.LayerNorm(C)
        self.lm_head = nn.Linear(C, V, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying
        self.apply(self._init_weights)

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = None if targets is None else F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss

    def configure_optimizers(self, weight_decay, lr):
        params = {n: p for n, p in self.named_parameters() if p.requires_grad}
        decay = [p for n, p in params.items() if p.dim() >= 2]
        no_decay = [p for n, p in params.items() if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95))


torch.manual_seed(1337)
tokens = torch.from_numpy(h.data(8, T + 1, seed=5, kind="int", high=V))
x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
model = h.same_start(torch, GPT())
n_params = sum(p.numel() for p in model.parameters())
assert n_params == sum(p.nelement() for p in model.parameters())
assert next(model.parameters()).dtype == torch.float32
optimizer = model.configure_optimizers(weight_decay=0.1, lr=3e-3)

model.eval()
with torch.no_grad():
    _, first = model(x, y)
model.train()
losses = []
for step in range(12):
    logits, loss = model(x, y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    losses.append(loss.item())
assert math.isfinite(losses[-1])
h.report(first.item(), losses)
