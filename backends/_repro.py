"""Source text for `attnref repro` scripts: the case's semantics written out in plain torch.

A repro script imports only torch and the library under test. This module writes its shared
parts: the constants of one Case, `visible(i)` (which keys each query of sequence i sees, with only
the rules the case uses), `alibi_bias(i)`, and a per-sequence softmax attention used as the float64
reference (and, with planted edits, as a mutant's kernel). Backends add `kernel(q, ks, vs)`, their
library call, through `Backend.repro_kernel`.
"""
from __future__ import annotations

from reference.case import Case, ValueSource
from reference.values import EDGE_MARGIN, RECENT_BOOST, TABLE_ABOVE, TABLE_SEED, TABLE_SIZE

from ._repro_cache import WRITTEN_DTYPES


class ReproUnsupported(ValueError):
    """The case uses something a plain-torch repro script does not write out; the message says what."""


def check(case: Case) -> None:
    """Raise ReproUnsupported for cases whose inputs need attnref's own machinery (block-sparse layouts, int4)."""
    if case.block_sparse is not None:
        raise ReproUnsupported("block_sparse cases need attnref's per-head layouts; replay them with attnref")
    if case.cache is not None and case.kv_cache_dtype.value not in WRITTEN_DTYPES:
        raise ReproUnsupported(f"kv_cache_dtype={case.kv_cache_dtype.value}: repro scripts write out "
                               f"{', '.join(WRITTEN_DTYPES)}; replay with attnref")


def constants(case: Case) -> str:
    """The case as Python constants: SEQS = [(query_len, kv_len, position of the first query)], ..."""
    seqs = [(s.query_len, k, case.query_offset(s)) for s, k in zip(case.sequences, case.kv_lens)]
    lines = [
        f"SEED = {case.seed}",
        f"DTYPE = torch.{case.dtype.value}",
        f"H, H_KV, D, D_V = {case.num_heads}, {case.num_kv_heads}, {case.head_size}, {case.value_size}",
        "GROUP = H // H_KV  # query heads per kv head: query head h reads kv head h // GROUP",
        f"SEQS = {seqs}  # (query_len, kv_len, position of the first query among the keys)",
        f"SCALE = {case.softmax_scale!r}",
        f"CAUSAL = {case.is_causal}",
        f"WINDOW = {tuple(case.window_bounds)}  # (left, right) key distance from the query; None: unbounded",
        f"CHUNK = {case.attn_chunk_size}",
        f"SOFT_CAP = {case.soft_cap}",
        f"SINKS = {None if case.sinks is None else 'torch.tensor(' + repr(list(case.sinks)) + ')'}",
        f"ALIBI = {None if case.alibi is None else 'torch.tensor(' + repr(list(case.alibi.slopes)) + ')'}",
        f"ALIBI_MODE = {None if case.alibi is None else case.alibi.convention.value!r}  # signed | symmetric | sqrt",
        f"ALIBI_IN_DTYPE = {case.alibi_held_in is not None}  # the bias reaches the kernel as a DTYPE tensor",
    ]
    return "\n".join(lines + rules(case)) + "\n"


def rules(case: Case) -> list[str]:
    """vLLM's extra mask rules and qq_bias as constants (only those the case uses)."""
    lines = []
    if case.bidirectional_ranges is not None:
        lines.append(f"RANGES = {[list(r) for r in case.bidirectional_ranges]}  # PrefixLM: per sequence, inclusive "
                     "(start, end) positions that see each other both ways")
    if case.global_prefix is not None:
        g = case.global_prefix
        lines.append(f"GLOBAL_PREFIX = ({g.window}, {list(g.prefix_lens)})  # R-SWA: (window, each sequence's prompt "
                     "length): the prompt stays visible, other keys within the last `window` positions")
    if case.chunk_lookback is not None:
        lines.append(f"LOOKBACK = ({case.sliding_window // (case.chunk_lookback + 1)}, {case.chunk_lookback})  "
                     "# (chunk size, chunks looked back): replaces the window")
    if case.qq_bias:
        lines.append(f"QQ_BIAS = 2.0 * torch.randn({case.max_query_len}, {case.max_query_len}, "
                     "generator=torch.Generator().manual_seed(SEED ^ 0xB1A5))  # added to new token j's score")
    for name in ("RANGES", "GLOBAL_PREFIX", "LOOKBACK", "QQ_BIAS"):
        if not any(line.startswith(name + " ") for line in lines):
            lines.append(f"{name} = None")
    return lines


def normal_draws(case: Case) -> list[str]:
    """`normal(g, rows, *shape)`: the case's normal draws as reference/values.py makes them (Values.source)."""
    if case.values.source == ValueSource.GENERATOR:
        return ["def normal(g, rows, *shape):", "    return torch.randn(rows, *shape, generator=g)", "", ""]
    return [f"TABLE = torch.randn({TABLE_SIZE}, generator=torch.Generator().manual_seed({TABLE_SEED:#x}))  "
            "# the fixed table of normal draws",
            "", "",
            "def normal(g, rows, *shape):",
            f"    \"\"\"Tensors of {TABLE_ABOVE} values or more: for each row, where it starts in TABLE, then its values.\"\"\"",
            "    size = math.prod(shape)",
            f"    if rows * size < {TABLE_ABOVE}:",
            "        return torch.randn(rows, *shape, generator=g)",
            "    starts = torch.randint(0, TABLE.numel() - size + 1, (rows,), generator=g)",
            "    return TABLE.unfold(0, size, 1).index_select(0, starts).view(rows, *shape)",
            "", ""]


def draw_inputs(case: Case) -> str:
    """Seeded inputs, drawn in the order attnref draws them (the same tensors, bit for bit)."""
    dist = case.values.distribution.value
    c = case.cache
    shared = c.prefix_blocks * c.block_size if c is not None and c.table.value == "shared_prefix" else 0
    lines = [] if dist != "edge" else [
        "def edge_amplitude(n):",
        "    \"\"\"The last key's logit boost: log of the other keys' total weight, + 1, + their score sd.\"\"\"",
        "    log_n = math.log(max(n - 1, 1))",
        f"    s = {case.values.logit_scale!r} * math.sqrt(D) * SCALE",
        "    log_total = log_n + s * s / 2 if s * s <= 2 * log_n else s * math.sqrt(2 * log_n)",
        f"    return math.sqrt((log_total + {EDGE_MARGIN!r} + s) / SCALE)",
        "", ""]
    lines += normal_draws(case)
    lines += ["def draw_inputs():",
             "    g = torch.Generator().manual_seed(SEED)",
             "    n = sum(s[0] for s in SEQS)",
             "    q = normal(g, n, H, D)"]
    if dist == "outliers":
        lines += ["    channels = torch.randint(0, D, (2,), generator=g)", "    q[:, :, channels] *= 8.0"]
    lines += [f"    q = q * {case.values.logit_scale!r}"]
    if dist == "recent":  # a recency bias from its own generator: the latest keys carry weight
        lines += ["    u = torch.randn(H_KV, D, generator=torch.Generator().manual_seed(SEED ^ 0x5EED))",
                  "    u = u / u.norm(dim=-1, keepdim=True).clamp(min=1e-12)",
                  f"    a = {RECENT_BOOST} ** 0.5 / SCALE ** 0.5",
                  "    q = q + a * u.repeat_interleave(GROUP, 0)[None]"]
    if dist == "edge":  # each sequence's last key takes about 3/4 of its rows' weight (see edge_amplitude)
        lines += ["    u = torch.randn(H_KV, D, generator=torch.Generator().manual_seed(SEED ^ 0x5EED))",
                  "    u = u / u.norm(dim=-1, keepdim=True).clamp(min=1e-12)",
                  "    uq = u.repeat_interleave(GROUP, 0)",
                  "    q = q - (q * uq).sum(-1, keepdim=True) * uq",
                  "    start = 0",
                  "    for q_len, kv_len, _ in SEQS:",
                  "        q[start:start + q_len] += edge_amplitude(kv_len) * uq",
                  "        start += q_len"]
    if case.values.query_zero_dims is not None:  # Values.query_zero_dims: drawn all the same, then zeroed
        start, end = case.values.query_zero_dims
        lines += [f"    q[..., {start}:{end}] = 0  # the query dimensions an MLA layer's absorbed query leaves at 0"]
    lines += [
              f"    shared = {shared}  # keys every sequence shares (a shared-prefix block table)",
              "    prefix_k, prefix_v = normal(g, shared, H_KV, D), normal(g, shared, H_KV, D_V)",
              "    prototypes = normal(g, 4, H_KV, D)",
              "    ks, vs = [], []",
              "    for _, kv_len, _ in SEQS:",
              "        k, v = normal(g, kv_len, H_KV, D), normal(g, kv_len, H_KV, D_V)"]
    if dist == "sharp":
        lines += ["        which = torch.randint(0, 4, (kv_len,), generator=g)",
                  "        k = prototypes[which] * 2.0 + 0.05 * k  # near-duplicate keys: peaked, near-tied softmax"]
    elif dist == "outliers":
        lines += ["        if kv_len:", "            tokens = torch.randint(0, kv_len, (max(1, kv_len // 16),), generator=g)"]
        if case.values.outliers_at_edge:
            lines += ["            tokens = torch.cat([tokens, torch.tensor([kv_len - 1])])  # the edge key among them"]
        lines += ["            k[tokens] *= 8.0"]
    elif dist == "recent":
        lines += ["        j = torch.arange(kv_len, dtype=torch.float32)",
                  "        ramp = torch.maximum((j / max(kv_len - 1, 1)) ** 2, torch.exp2(-(kv_len - 1 - j) / 4))",
                  "        k = k + a * ramp[:, None, None] * u[None]"]
    elif dist == "edge":
        lines += ["        if kv_len:",
                  "            k = k - (k * u).sum(-1, keepdim=True) * u",
                  "            k[-1] += edge_amplitude(kv_len) * u"]
    if case.values.edge_value_gain != 1.0:
        lines += ["        if kv_len:", f"            v[-1] *= {case.values.edge_value_gain!r}  # the edge key's value"]
    lines += ["        k[:shared], v[:shared] = prefix_k, prefix_v"]
    if c is not None and c.layout.value == "mla_latent":
        lines += ["        v = k[..., :D_V].clone()  # MLA: the value is the latent's first D_V dims"]
    lines += ["        ks.append(k.to(DTYPE))", "        vs.append(v.to(DTYPE))",
              "    return q.to(DTYPE), ks, vs"]
    return "\n".join(lines) + "\n"


MASKS = '''
def positions(i, offset_shift=0):
    q_len, kv_len, first = SEQS[i]
    return torch.arange(q_len)[:, None] + first + offset_shift, torch.arange(kv_len)[None, :]


def visible(i, window_extra=0, offset_shift=0):
    """Bool [query_len, kv_len]: the keys each query of sequence i may see."""
    qp, kp = positions(i, offset_shift)
    ok = torch.ones(qp.shape[0], kp.shape[1], dtype=torch.bool)
    if CAUSAL:
        ok &= kp <= qp
    if LOOKBACK is not None:  # the key's chunk is the query's own or one of LOOKBACK[1] before it
        ok &= qp // LOOKBACK[0] - kp // LOOKBACK[0] <= LOOKBACK[1]
    else:
        if WINDOW[0] is not None:
            ok &= qp - kp <= WINDOW[0] + window_extra
        if WINDOW[1] is not None:
            ok &= kp - qp <= WINDOW[1]
    if GLOBAL_PREFIX is not None:
        ok &= (kp < GLOBAL_PREFIX[1][i]) | (qp - kp < GLOBAL_PREFIX[0])
    if RANGES is not None:  # (causal and window) or one range holding both
        for start, end in RANGES[i]:
            ok |= (qp >= start) & (qp <= end) & (kp >= start) & (kp <= end)
    if CHUNK is not None:
        ok &= qp // CHUNK == kp // CHUNK
    return ok


def alibi_bias(i, sign=1.0):
    """[H, query_len, kv_len] float64: slope * (k - q) (signed), -slope * |k - q| (symmetric) or
    -slope * sqrt(q - k) for k <= q, else 0 (sqrt), rounded to DTYPE where the kernel takes it so; None without ALiBi."""
    if ALIBI is None:
        return None
    qp, kp = positions(i)
    d = (kp - qp).double()
    d = {"signed": d, "symmetric": -d.abs(), "sqrt": -(-d).clamp(min=0).sqrt()}[ALIBI_MODE]
    bias = ALIBI.double()[:, None, None] * d[None]
    return sign * (bias.to(DTYPE).double() if ALIBI_IN_DTYPE else bias)
'''


def attention_function(name: str, dtype: str, *, window_extra: int = 0, offset_shift: str = "0",
                       soft_cap: bool = True, alibi_sign: float = 1.0, kv_head: str = "h // GROUP",
                       lse_divisor: str = "1.0") -> str:
    """`def name(q, ks, vs, dtype=...)`: softmax attention per sequence -> (out [N, H, D_V], lse [N, H]).

    The keyword edits plant a mutant's bug (defaults: the correct semantics)."""
    return f'''
def {name}(q, ks, vs, dtype={dtype}):
    outs, lses, start = [], [], 0
    heads = torch.tensor([{kv_head} for h in range(H)])
    for i, (q_len, kv_len, _) in enumerate(SEQS):
        qi = q[start:start + q_len].cpu().to(dtype)
        start += q_len
        k, v = ks[i].cpu().to(dtype)[:, heads], vs[i].cpu().to(dtype)[:, heads]
        s = torch.einsum("qhd,khd->hqk", qi * SCALE, k)
        if SOFT_CAP is not None and {soft_cap}:
            s = SOFT_CAP * torch.tanh(s / SOFT_CAP)  # soft-cap comes before biases and masks
        bias = alibi_bias(i, sign={alibi_sign})
        if bias is not None:
            s = s + bias.to(s.dtype)
        if QQ_BIAS is not None:
            s[:, :, kv_len - q_len:] += QQ_BIAS[:q_len, :q_len].to(s.dtype)
        s = s.masked_fill(~visible(i, {window_extra}, {offset_shift})[None], float("-inf"))
        lse = torch.logsumexp(s, -1)  # -inf for a row that sees no key
        if SINKS is not None:
            lse = torch.logaddexp(lse, SINKS.to(s.dtype)[:, None])  # a sink joins the denominator, no value
        p = torch.exp(s - lse[..., None]).nan_to_num(0.0)  # an empty row: output 0
        rounding = globals().get("P_FP8")
        if rounding is not None and dtype != torch.float64:  # the kernel's P.V in fp8: its weights as it holds them
            top = s.amax(-1, keepdim=True)
            if SINKS is not None:  # the running max starts at the sink
                top = torch.maximum(top, SINKS.to(s.dtype)[:, None, None])
            top = top.nan_to_num(0.0, neginf=0.0)
            held = (torch.exp(s - top) * rounding[1]).to(rounding[0]).to(s.dtype) / rounding[1]
            p = torch.where(torch.isfinite(lse)[..., None], held * torch.exp(top - lse[..., None]), 0.0).to(s.dtype)
        outs.append(torch.einsum("hqk,khd->qhd", p, v))
        lses.append(lse.transpose(0, 1) / {lse_divisor})
    return torch.cat(outs), torch.cat(lses)
'''

