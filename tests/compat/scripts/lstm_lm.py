"""A word-level LSTM language model in the PyTorch examples' idiom: Embedding, a two-layer
batch_first LSTM, a decoder tied to the encoder, hidden state carried and detached between
batches, NLLLoss over log_softmax, clip_grad_norm_, plain SGD written with p.data."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import compat_harness as h

NTOKEN, NINP, NHID, BPTT, BATCH = 40, 16, 16, 8, 4


class RNNModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Embedding(NTOKEN, NINP)
        self.rnn = nn.LSTM(NINP, NHID, 2, batch_first=True)
        self.decoder = nn.Linear(NHID, NTOKEN)
        self.decoder.weight = self.encoder.weight
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)

    def forward(self, x, hidden):
        output, hidden = self.rnn(self.encoder(x), hidden)
        return F.log_softmax(self.decoder(output), dim=-1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (weight.new_zeros(2, bsz, NHID), weight.new_zeros(2, bsz, NHID))


def repackage_hidden(hidden):
    return tuple(v.detach() for v in hidden)


torch.manual_seed(0)
starts = h.data(BATCH, 1, seed=7, kind="int", high=NTOKEN)
corpus = torch.from_numpy((starts + 7 * np.arange(6 * BPTT + 1)) % NTOKEN)  # a sequence rule to learn
model = h.same_start(torch, RNNModel())
criterion = nn.NLLLoss()
lr = 20.0

model.eval()
with torch.no_grad():
    out, _ = model(corpus[:, :BPTT], model.init_hidden(BATCH))
    first = criterion(out.view(-1, NTOKEN), corpus[:, 1:BPTT + 1].reshape(-1)).item()
losses = []
for epoch in range(3):
    model.train()
    hidden = model.init_hidden(BATCH)
    total = 0.0
    for i in range(0, corpus.size(1) - 1, BPTT):
        data, targets = corpus[:, i:i + BPTT], corpus[:, i + 1:i + 1 + BPTT]
        hidden = repackage_hidden(hidden)
        model.zero_grad()
        output, hidden = model(data, hidden)
        loss = criterion(output.view(-1, NTOKEN), targets.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)
        total += loss.item()
    losses.append(total / 6)
h.report(first, losses)
