"""Cross-attention regression fitted full-batch by L-BFGS with the strong-Wolfe line search: an
nn.MultiheadAttention whose keys and values are narrower than its queries (kdim, vdim) with
add_bias_kv and add_zero_attn, sequence-first inputs, the attention weights returned and used,
a key padding mask, MSELoss, optimizer.step(closure)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

import compat_harness as h


class CrossAttentionRegressor(nn.Module):
    def __init__(self, embed_dim=8, heads=2, key_dim=5, value_dim=3):
        super().__init__()
        self.attn = nn.MultiheadAttention(embed_dim, heads, kdim=key_dim, vdim=value_dim, add_bias_kv=True,
                                          add_zero_attn=True)
        self.head = nn.Linear(embed_dim, 1)

    def forward(self, query, keys, values, padding):
        out, weights = self.attn(query, keys, values, key_padding_mask=padding)
        return self.head(F.gelu(out)).squeeze(-1), weights


torch.manual_seed(0)
length, source, batch = 6, 7, 4
query = torch.from_numpy(h.data(length, batch, 8, seed=1))
keys = torch.from_numpy(h.data(source, batch, 5, seed=2))
values = torch.from_numpy(h.data(source, batch, 3, seed=3))
padding = torch.zeros(batch, source, dtype=torch.bool)
padding[0, -2:] = True  # the first sequence's memory is shorter
target = torch.tanh(query.sum(-1) * 0.3) + 0.1 * torch.from_numpy(h.data(length, batch, seed=4))

model = h.same_start(torch, CrossAttentionRegressor())
criterion = nn.MSELoss()
optimizer = torch.optim.LBFGS(model.parameters(), lr=1, max_iter=8, history_size=10, line_search_fn="strong_wolfe")


def closure():
    optimizer.zero_grad()
    prediction, weights = model(query, keys, values, padding)
    loss = criterion(prediction, target) + 1e-3 * weights.pow(2).mean()
    loss.backward()
    return loss


losses = [optimizer.step(closure).item() for _ in range(4)]
with torch.no_grad():
    final = criterion(model(query, keys, values, padding)[0], target).item()
assert losses[-1] < losses[0]
h.report(losses[0], losses + [final])
