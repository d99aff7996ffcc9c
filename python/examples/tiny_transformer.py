"""A small causal transformer whose attention is a parameter: PyTorch's (the formula written
out, as torch.nn.MultiheadAttention computes it; PyTorch 1.13 has no fused CPU attention) or
attn.torch.scaled_dot_product_attention. Used by train_step.py and by the tests, which train
it both ways on a copy task (a random sequence, then the same sequence again: the second half
is predictable only by attending back).
"""
import math

import torch
from torch import nn


def torch_attention(q, k, v):
    """softmax(q k^T / sqrt(D), causal) v on [B, H, L, D] tensors, in torch."""
    L, S = q.shape[-2], k.shape[-2]
    s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
    s = s.masked_fill(torch.ones(L, S, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def torch_attention_float64(q, k, v):
    """torch_attention computed in float64 and rounded back: the oracle of the comparisons."""
    return torch_attention(q.double(), k.double(), v.double()).to(q.dtype)


def attn_attention(q, k, v):
    """The same through libattn (attn.torch)."""
    import attn.torch
    return attn.torch.scaled_dot_product_attention(q, k, v, is_causal=True)


class Block(nn.Module):
    """Pre-norm block: x + proj(attention(qkv(ln(x)))), then x + mlp(ln(x))."""

    def __init__(self, d_model, heads, attention):
        super().__init__()
        self.heads, self.attention = heads, attention
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(),
                                 nn.Linear(4 * d_model, d_model))

    def forward(self, x):
        B, L, E = x.shape
        qkv = self.qkv(self.ln1(x)).view(B, L, 3, self.heads, E // self.heads)
        q, k, v = (t.transpose(1, 2) for t in qkv.unbind(2))  # [B, H, L, D] views
        a = self.attention(q, k, v).transpose(1, 2).reshape(B, L, E)
        x = x + self.proj(a)
        return x + self.mlp(self.ln2(x))


class TinyTransformer(nn.Module):
    def __init__(self, vocab, max_len, d_model=256, heads=8, layers=2, attention=torch_attention):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, heads, attention) for _ in range(layers))
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, tokens):
        x = self.tok(tokens) + self.pos(torch.arange(tokens.shape[1]))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


def copy_batch(gen, batch, half, vocab):
    """tokens [batch, 2 * half]: a random sequence repeated; the targets of positions
    half-1 .. 2*half-2 are the tokens after them (the copy)."""
    x = torch.randint(0, vocab, (batch, half), generator=gen)
    return torch.cat([x, x], dim=1)


def copy_loss(model, tokens, half):
    logits = model(tokens[:, :-1])[:, half - 1:]
    return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                       tokens[:, half:].reshape(-1))


def train(attention, steps, dtype=torch.float32, batch=4, half=6, vocab=16, seed=0,
          lr=1e-3):
    """Losses of `steps` Adam steps on fresh copy batches; the same initial weights and batches
    for every attention and dtype (both from `seed`)."""
    torch.manual_seed(seed)
    model = TinyTransformer(vocab, 2 * half, attention=attention).to(dtype)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed + 1)
    losses = []
    for _ in range(steps):
        loss = copy_loss(model, copy_batch(gen, batch, half, vocab), half)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses
