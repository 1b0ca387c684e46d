"""A GRU language model in the word_language_model example's idiom, sequence-first: an
Embedding with dropout, a two-layer nn.GRU with inter-layer dropout, the hidden state from
weight.new_zeros carried across batches and detached, CrossEntropyLoss over view(-1, ntoken),
clip_grad_norm_, Adam whose param_groups' lr decays by hand each epoch."""
import numpy as np
import torch
import torch.nn as nn

import compat_harness as h

NTOKEN, NINP, NHID, NLAYERS, BPTT, BATCH = 24, 16, 32, 2, 8, 5


class RNNModel(nn.Module):
    def __init__(self, ntoken, ninp, nhid, nlayers, dropout=0.2):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.GRU(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        self.nhid, self.nlayers = nhid, nlayers

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        return self.decoder(output), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return weight.new_zeros(self.nlayers, bsz, self.nhid)


torch.manual_seed(0)
rows = []
for b in range(BATCH):  # each row repeats its own short motif: the model must remember it
    motif = h.data(3, seed=20 + b, kind="int", high=NTOKEN)
    rows.append(np.resize(motif, 4 * BPTT + 1))
source = torch.from_numpy(np.stack(rows, axis=1))  # (33, BATCH), sequence-first
model = h.same_start(torch, RNNModel(NTOKEN, NINP, NHID, NLAYERS))
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)

model.eval()
with torch.no_grad():
    output, _ = model(source[:BPTT], model.init_hidden(BATCH))
    first = criterion(output.view(-1, NTOKEN), source[1:BPTT + 1].reshape(-1)).item()
losses = []
for epoch in range(6):
    model.train()
    hidden = model.init_hidden(BATCH)
    total, batches = 0.0, 0
    for i in range(0, source.size(0) - 1, BPTT):
        data, targets = source[i:i + BPTT], source[i + 1:i + 1 + BPTT].reshape(-1)
        hidden = hidden.detach()
        model.zero_grad()
        output, hidden = model(data, hidden)
        loss = criterion(output.view(-1, NTOKEN), targets)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        total += loss.item()
        batches += 1
    for group in optimizer.param_groups:
        group["lr"] *= 0.9
    losses.append(total / batches)
h.report(first, losses)
