"""Measures, with real PyTorch on CPU, the memory of one training step:
parameters, gradients, optimizer states and the activations autograd saves
for backward (unique storages seen by saved_tensors_hooks, parameters
excluded, inputs included)."""
import torch
import torch.nn.functional as F


def _fused_dropout(input, p=0.5, training=True, inplace=False):
    """What CUDA runs for nn.Dropout: native_dropout keeps a 1-byte mask.
    CPU's composite dropout would keep a 4-byte noise tensor instead, which
    no GPU run does; torchvision's models call F.dropout, so patch it."""
    if not training or p == 0.0:
        return input
    return torch.native_dropout(input, p, True)[0]


F.dropout = _fused_dropout


def storage_key(t):
    st = t.storage() if not hasattr(t, "untyped_storage") else t.untyped_storage()
    return st.data_ptr(), st.nbytes()


def make_inputs(kind, model, batch, seq, image):
    g = torch.Generator().manual_seed(0)
    if kind == "image":
        x = torch.randn(batch, 3, image, image, generator=g)
        y = torch.randint(0, 1000, (batch,), generator=g)
        return (x,), lambda out: F.cross_entropy(out, y)
    if kind == "rnn":
        vocab = model.encoder.num_embeddings
        ids = torch.randint(0, vocab, (seq, batch), generator=g)
        tgt = torch.randint(0, vocab, (seq * batch,), generator=g)
        return (ids,), lambda out: F.cross_entropy(out.view(-1, vocab), tgt)
    vocab = (model.word if kind == "bert" else model.shared if kind == "t5" else
             getattr(model, "wte", None) or model.embed).num_embeddings
    ids = torch.randint(0, vocab, (batch, seq), generator=g)
    if kind == "bert":
        return (ids,), lambda out: out[1].square().mean()
    tgt = torch.randint(0, vocab, (batch * seq,), generator=g)
    loss = lambda out: F.cross_entropy(out.reshape(-1, vocab), tgt)
    if kind == "t5":
        return (ids, ids.clone()), loss
    return (ids,), loss


def measure_amp_activations(model, kind, batch, seq=0, image=0):
    """Activations of a forward pass under emulated CUDA autocast (bf16),
    without the cached bf16 weight copies (2 bytes per parameter, which the
    ZeRO accounting counts as the half-precision parameters); and those."""
    from cuda_autocast import CudaAutocast

    model.train()
    params = {storage_key(p)[0] for p in list(model.parameters()) + list(model.buffers())}
    inputs, loss_fn = make_inputs(kind, model, batch, seq, image)
    saved = {}

    def pack(t):
        ptr, nbytes = storage_key(t)
        if ptr not in params and nbytes:
            saved[ptr] = max(saved.get(ptr, 0), nbytes)
        return t

    mode = CudaAutocast(torch.bfloat16)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with mode:
            loss = loss_fn(model(*inputs))
    casts = {storage_key(v)[0]: storage_key(v)[1] for v in mode.cache.values()}
    act = sum(n for ptr, n in saved.items() if ptr not in casts)
    del loss
    return act, sum(casts.values())


def measure_step(model, kind, batch, seq=0, image=0, optimizer="adamw"):
    model.train()
    # parameters and buffers (BatchNorm running statistics) are counted as
    # such, not as activations, when autograd keeps them
    params = {storage_key(p)[0] for p in list(model.parameters()) + list(model.buffers())}
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    buffer_bytes = sum(b.numel() * b.element_size() for b in model.buffers())
    inputs, loss_fn = make_inputs(kind, model, batch, seq, image)
    saved = {}

    def pack(t):
        ptr, nbytes = storage_key(t)
        if ptr not in params and nbytes:
            saved[ptr] = max(saved.get(ptr, 0), nbytes)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = loss_fn(model(*inputs))
    act_bytes = sum(saved.values())
    loss.backward()
    del loss
    grad_bytes = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters() if p.grad is not None)
    opt = {"adamw": torch.optim.AdamW, "adam": torch.optim.Adam, "sgd": torch.optim.SGD}[optimizer]
    o = opt(model.parameters(), lr=1e-4) if optimizer != "sgd" else opt(model.parameters(), lr=1e-4)
    o.step()
    opt_bytes = sum(v.numel() * v.element_size() for s in o.state.values() for v in s.values()
                    if torch.is_tensor(v))
    o.zero_grad(set_to_none=True)
    return {"parameters": param_bytes, "buffers": buffer_bytes, "gradients": grad_bytes,
            "optimizer_states": opt_bytes, "activations": act_bytes}
