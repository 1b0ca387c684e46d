"""A Transformer language model in the word_language_model example's idiom: sequence-first
batches (batchify / get_batch), sinusoidal PositionalEncoding as a registered buffer,
nn.TransformerEncoder over nn.TransformerEncoderLayer with dropout, the causal mask from
nn.Transformer.generate_square_subsequent_mask, log_softmax + NLLLoss, clip_grad_norm_, SGD with
a StepLR schedule."""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import compat_harness as h

NTOKEN, EMSIZE, NHEAD, NHID, NLAYERS, BPTT, BATCH = 30, 32, 4, 64, 2, 10, 6


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, dropout=0.1, max_len=64):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        pe = pe.unsqueeze(0).transpose(0, 1)
        self.register_buffer("pe", pe)

    def forward(self, x):
        x = x + self.pe[:x.size(0), :]
        return self.dropout(x)


class TransformerModel(nn.Module):
    def __init__(self, ntoken, ninp, nhead, nhid, nlayers, dropout=0.1):
        super().__init__()
        self.model_type = "Transformer"
        self.src_mask = None
        self.pos_encoder = PositionalEncoding(ninp, dropout)
        encoder_layers = nn.TransformerEncoderLayer(ninp, nhead, nhid, dropout)
        self.transformer_encoder = nn.TransformerEncoder(encoder_layers, nlayers, enable_nested_tensor=False)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.ninp = ninp
        self.decoder = nn.Linear(ninp, ntoken)
        self.init_weights()

    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, src, has_mask=True):
        if has_mask:
            if self.src_mask is None or self.src_mask.size(0) != len(src):
                self.src_mask = nn.Transformer.generate_square_subsequent_mask(len(src)).to(src.device)
        else:
            self.src_mask = None
        src = self.encoder(src) * math.sqrt(self.ninp)
        src = self.pos_encoder(src)
        output = self.transformer_encoder(src, self.src_mask)
        output = self.decoder(output)
        return F.log_softmax(output, dim=-1)


def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    data = data.narrow(0, 0, nbatch * bsz)
    return data.view(bsz, -1).t().contiguous()


def get_batch(source, i):
    seq_len = min(BPTT, len(source) - 1 - i)
    data = source[i:i + seq_len]
    target = source[i + 1:i + 1 + seq_len].reshape(-1)
    return data, target


torch.manual_seed(0)
starts = h.data(BATCH, seed=11, kind="int", high=NTOKEN)
stream = (starts[:, None] + 3 * np.arange(4 * BPTT + 1)) % NTOKEN  # each row counts up by 3
train_data = batchify(torch.from_numpy(stream.reshape(-1)), BATCH)  # (41, BATCH), sequence-first
model = h.same_start(torch, TransformerModel(NTOKEN, EMSIZE, NHEAD, NHID, NLAYERS))
criterion = nn.NLLLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.9)

model.eval()
with torch.no_grad():
    data, targets = get_batch(train_data, 0)
    first = criterion(model(data).view(-1, NTOKEN), targets).item()
losses = []
for epoch in range(4):
    model.train()
    total = 0.0
    batches = 0
    for i in range(0, train_data.size(0) - 1, BPTT):
        data, targets = get_batch(train_data, i)
        optimizer.zero_grad()
        output = model(data)
        loss = criterion(output.view(-1, NTOKEN), targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optimizer.step()
        total += loss.item()
        batches += 1
    scheduler.step()
    losses.append(total / batches)
h.report(first, losses)
