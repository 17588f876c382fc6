"""Source text for `attnref repro` scripts: the KV cache as a kernel is handed it.

`HELPERS` builds paged caches (page 1 on, canaries elsewhere) from a script's per-sequence keys and
values; `storage(case)` writes out a quantized cache as vLLM's writers store it (reference/quant.py
in plain torch), with the case's scales, so that a script's float64 reference reads back exactly what
the kernel reads: stored x scale.
"""
from __future__ import annotations

from reference.case import Case, KVCacheDType, KVLayout
from reference.int4 import SIGN_SEED
from reference.quant import FP8_MAX, K_RANGE, Q_RANGE, TOKEN_HEAD_MAX, TOKEN_HEAD_MIN_SCALE, V_RANGE

# The int8 fork's modes (per-channel value scales, a per-block key scale cache) stay with `attnref replay`.
WRITTEN_DTYPES = ("auto", "bfloat16", "float16", "fp8_e4m3", "fp8_e5m2", "int8_per_token_head", "fp8_per_token_head",
                  "int4_per_token_head")

HELPERS = '''
def poison_free_memory():
    """Fill free CUDA memory the caching allocator will hand out with 0xFF bytes (NaN in every float format): memory a
    kernel leaves unwritten then shows, as inside a long-running process (a fresh process's memory reads as zeros)."""
    if DEVICE == "cuda":
        small = [torch.full((1 << 20,), 255, dtype=torch.uint8, device=DEVICE) for _ in range(64)]  # the small pool
        large = torch.full((1 << 28,), 255, dtype=torch.uint8, device=DEVICE)  # the large pool
        del small, large


def cu_seqlens(column):
    """[0, n_0, n_0 + n_1, ...] int32 on DEVICE of SEQS' column 0 (queries) or 1 (keys)."""
    return torch.tensor([0] + [sum(s[column] for s in SEQS[:j + 1]) for j in range(len(SEQS))], dtype=torch.int32,
                        device=DEVICE)


def block_table(block_size):
    """Each sequence's pages, numbered from 1 in order: the table [B, max pages] (unused entries 0), each sequence's
    page count and its key count."""
    pages = [-(-kv_len // block_size) for _, kv_len, _ in SEQS]
    table = torch.zeros(len(SEQS), max(pages + [1]), dtype=torch.int32, device=DEVICE)
    first = 1
    for i, n in enumerate(pages):
        table[i, :n] = torch.arange(first, first + n, dtype=torch.int32)
        first += n
    return table, pages, torch.tensor([s[1] for s in SEQS], dtype=torch.int32, device=DEVICE)


def paged(xs, block_size, fill):
    """Per-sequence tensors [kv_len, ...] in one pool [1 + pages, block_size, ...] laid out as block_table says, in
    xs' dtype; page 0 and every unused slot hold `fill` (0 in an integer pool)."""
    _, pages, _ = block_table(block_size)
    dtype = xs[0].dtype
    fill = fill if dtype.is_floating_point else 0
    pool = torch.full((1 + sum(pages), block_size) + tuple(xs[0].shape[1:]), fill, device=DEVICE).to(dtype)
    first = 1
    for x, n in zip(xs, pages):
        pool.view(-1, *x.shape[1:])[first * block_size:first * block_size + x.shape[0]] = x
        first += n
    return pool


def paged_cache(ks, vs, block_size, fill=float("nan")):
    """Each sequence's keys and values in pages of block_size tokens, [pages, block_size, H_KV, D] (int4: D / 2
    bytes), with `fill` wherever no key is, so a kernel that reads past a sequence shows it. Returns the two pools
    and block_table's table, page counts and key counts."""
    return (paged(ks, block_size, fill), paged(vs, block_size, fill)) + block_table(block_size)


def page_csr(lists, last):
    """CSR page metadata (FlashInfer's form) of per-request page lists: (indptr, indices, slots used on each last
    page), int32 on DEVICE."""
    indptr = torch.tensor([0] + [x.numel() for x in lists], device=DEVICE).cumsum(0).to(torch.int32)
    return indptr, torch.cat(lists).to(torch.int32), torch.tensor(last, dtype=torch.int32, device=DEVICE)


def page_metadata(table, pages, block_size, first=0):
    """page_csr of each sequence's pages (block_table's table and page counts) from page `first` on."""
    return page_csr([table[i, first:n] for i, n in enumerate(pages)],
                    [s[1] - (n - 1) * block_size if n > first else 0 for s, n in zip(SEQS, pages)])


def prefix_ranges():
    """RANGES as vLLM's kernels take them: [B, most ranges (at least 1), 2] int32 on DEVICE, (0, 0) padding."""
    width = max([len(r) for r in RANGES] + [1])
    return torch.tensor([list(r) + [(0, 0)] * (width - len(r)) for r in RANGES], dtype=torch.int32,
                        device=DEVICE).reshape(len(RANGES), width, 2)


def paged_scales(scales, block_size):
    """Per-(token, kv head) scales [kv_len, H_KV] of each sequence in paged_cache's pages: [pages, block_size, H_KV]."""
    return paged([s.float() for s in scales], block_size, 1.0)


def v0_cache(k_cache, v_cache):
    """paged_cache's pools in vLLM's v0 layout: key [pages, H_KV, D / x, block_size, x] (x: 16 bytes of elements),
    value [pages, H_KV, D_V, block_size]."""
    pages, block_size = k_cache.shape[:2]
    x = 16 // k_cache.element_size()
    key = k_cache.view(pages, block_size, H_KV, D // x, x).permute(0, 2, 3, 1, 4).contiguous()
    return key, v_cache.permute(0, 2, 3, 1).contiguous()
'''

PLAIN_INPUTS = '''    q, ks, vs = draw_inputs()
    expected, expected_lse = reference(q, ks, vs)
    baseline, baseline_lse = reference(q, ks, vs, DTYPE)  # the same math rounded like a plain {dtype} pass
    poison_free_memory()
    actual, actual_lse = kernel(q.to(DEVICE), [k.to(DEVICE) for k in ks], [v.to(DEVICE) for v in vs])'''

STORED_INPUTS = '''    q, ks, vs = draw_inputs()
    stored = store(q, ks, vs)  # as the cache holds them (and the fp8 query, if any)
    expected, expected_lse = reference(*read_back(*stored, torch.float64))
    baseline, baseline_lse = reference(*read_back(*stored, DTYPE), DTYPE)  # a plain {dtype} pass
    {handed}
    poison_free_memory()
    actual, actual_lse = kernel(q.to(DEVICE), [k.to(DEVICE) for k in ks], [v.to(DEVICE) for v in vs],
                                [s.to(DEVICE) for s in k_scales], [s.to(DEVICE) for s in v_scales])'''


def _amax_dims(quant) -> str:
    """The slice the key scale's amax reads (Quant.dynamic_amax_dims: vLLM's MLA layer reads the latent only)."""
    return "" if quant.dynamic_amax_dims is None else f"[..., :{quant.dynamic_amax_dims}]"


def stored_inputs(writes_cache: bool) -> str:
    """main()'s inputs for a quantized case: the kernel is handed what the cache stores, or, for a library whose own
    writer stores them (`Backend.repro_writes_cache`), the unquantized keys and values with the scales."""
    handed = ("k_scales, v_scales = stored[3:]  # the library's writer stores the unquantized keys and values itself"
              if writes_cache else "q, ks, vs, k_scales, v_scales = stored")
    return STORED_INPUTS.replace("{handed}", handed)


def quantized(case: Case) -> bool:
    return case.cache is not None and case.kv_cache_dtype.value not in ("auto", "bfloat16", "float16")


def storage(case: Case) -> str:
    """`store(q, ks, vs)` and `read_back(...)` for a quantized case (empty text otherwise)."""
    if not quantized(case):
        return ""
    kvd, quant = case.kv_cache_dtype, case.cache.quant
    q_scale, why = quant.q_fp8_scale, "the query quantized to fp8 e4m3 too"
    if q_scale is not None and quant.dynamic_scales:  # the value calc_kv_scales computes from this case's query
        from reference.inputs import materialize

        q_scale, why = float(materialize(case).q_scale[0]), f"calc_kv_scales: amax(|q|) / {Q_RANGE} of this case's query"
    lines = [f'KV_CACHE_DTYPE = "{kvd.value}"', f"Q_FP8_SCALE = {q_scale!r}  # {why}", ""]
    if kvd == KVCacheDType.INT4_PER_TOKEN_HEAD:
        return "\n".join(lines + [f"SIGN_SEED = {SIGN_SEED:#x}  # vLLM's seed of the int4 rotation's signs"]) + INT4
    if kvd.is_per_token_head:
        qmax = TOKEN_HEAD_MAX[kvd]
        store_one = [
            "def store_one(x):",
            f'    """x [tokens, H_KV, D] -> (stored, scale [tokens, H_KV]): scale = max(amax / {qmax}, '
            f'{TOKEN_HEAD_MIN_SCALE}), vLLM\'s per-token-head writer."""',
            "    amax = x.abs().float().amax(-1)",
            f"    scale = torch.clamp(amax / torch.full_like(amax, {qmax}), min={TOKEN_HEAD_MIN_SCALE})",
            "    y = x.float() / scale[..., None]"]
        if kvd == KVCacheDType.INT8_PER_TOKEN_HEAD:
            store_one += ["    # round half away from zero (the Triton writer adds +-0.5 and truncates), saturate",
                          "    return (torch.sign(y) * torch.floor(y.abs() + 0.5)).clamp(-128, 127).to(torch.int8), scale"]
        else:
            store_one += ["    return y.clamp(-448.0, 448.0).to(torch.float8_e4m3fn), scale"]
        body = ["    ks, k_scales = zip(*[store_one(k) for k in ks])", "    vs, v_scales = zip(*[store_one(v) for v in vs])"]
    else:
        fp8 = "torch.float8_e4m3fn" if kvd == KVCacheDType.FP8_E4M3 else "torch.float8_e5m2"
        if quant.dynamic_scales:  # calc_kv_scales: amax over every key (value) / its range
            scales = ["    def dynamic(x, value_range):  # amax / range, divided in float32 as the layer does (1 for all zeros)",
                      "        amax = x.abs().max().float()",
                      "        return torch.where(amax > 0, amax / torch.tensor(value_range), torch.tensor(1.0)).reshape(1)",
                      f"    k_scale = dynamic(torch.cat(ks){_amax_dims(quant)}, {K_RANGE})",
                      "    v_scale = k_scale  # one latent tensor, one scale" if case.cache.layout == KVLayout.MLA_LATENT
                      else f"    v_scale = dynamic(torch.cat(vs), {V_RANGE})"]
        else:
            scales = [f"    k_scale = torch.tensor({list(quant.k_scales)!r})  # one, or one per kv head",
                      f"    v_scale = torch.tensor({list(quant.v_scales)!r})"]
        store_one = [
            "def store_one(x, scale):",
            f'    """x / scale saturated to {fp8}\'s finite range (vLLM\'s CUDA writer saturates; a plain cast would not)."""',
            f"    return (x.float() / scale.reshape(1, -1, 1)).clamp(-{FP8_MAX[kvd]}, {FP8_MAX[kvd]}).to({fp8})"]
        body = scales + ["    k_scales = [k_scale.reshape(1, -1)] * len(ks)", "    v_scales = [v_scale.reshape(1, -1)] * len(vs)",
                         "    ks, vs = [store_one(k, k_scale) for k in ks], [store_one(v, v_scale) for v in vs]"]
    lines += store_one + ["", "", "def store(q, ks, vs):",
                          '    """(query, stored keys, stored values, key scales, value scales): scales [tokens or 1, H_KV] '
                          'per sequence."""'] + body
    lines += ["    if Q_FP8_SCALE is not None:",
              "        q = (q.float() / Q_FP8_SCALE).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)",
              "    return q, list(ks), list(vs), list(k_scales), list(v_scales)", "", "",
              "def read_back(q, ks, vs, k_scales, v_scales, dtype):",
              '    """What the kernel reads: stored x scale, in `dtype`."""',
              "    q = q.to(dtype) * torch.tensor(Q_FP8_SCALE).to(dtype) if Q_FP8_SCALE is not None else q",
              "    return (q, [k.to(dtype) * s.to(dtype)[..., None] for k, s in zip(ks, k_scales)],",
              "            [v.to(dtype) * s.to(dtype)[..., None] for v, s in zip(vs, v_scales)])"]
    return "\n".join(lines) + "\n"


INT4 = '''

def hadamard(d):
    """Sylvester's unnormalized Hadamard matrix [d, d] and the format's +-1 signs (a CPU generator, vLLM's seed)."""
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < d:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    gen = torch.Generator().manual_seed(SIGN_SEED)
    return h, (2.0 * torch.bernoulli(torch.full((d,), 0.5), generator=gen) - 1.0).double()


def round_half_away(x):
    return torch.sign(x) * torch.floor(x.abs() + 0.5)


def store_one(x):
    """vLLM's int4 writer: rotate by H (s * x) (rounded to the model dtype), asymmetric 4-bit codes with
    scale = max((max - min) / 15, 1e-6) and zero point z, two codes per byte (element 2i low), z in the scale's
    low 4 mantissa bits. Returns (bytes [tokens, H_KV, d / 2], stored scales [tokens, H_KV])."""
    h, signs = hadamard(x.shape[-1])
    r = ((x.double() * signs) @ h).to(x.dtype).float()
    lo, hi = r.amin(-1), r.amax(-1)
    scale = torch.clamp((hi - lo) / torch.full_like(hi, 15.0), min=1e-6)
    zero = round_half_away(-lo / scale).clamp(0, 15)
    n = round_half_away(r * (1.0 / scale)[..., None] + zero[..., None]).clamp(0, 15).to(torch.uint8)
    stored = ((scale.contiguous().view(torch.int32) & ~0xF) | zero.to(torch.int32)).view(torch.float32)
    return n[..., 0::2] | (n[..., 1::2] << 4), stored


def store(q, ks, vs):
    """(query, key bytes, value bytes, key scales, value scales): stored scales [tokens, H_KV] per sequence."""
    ks, k_scales = zip(*[store_one(k) for k in ks])
    vs, v_scales = zip(*[store_one(v) for v in vs])
    return q, list(ks), list(vs), list(k_scales), list(v_scales)


def read_one(packed, stored, dtype):
    """s * H ((n - z) * scale) / d in float64 (the scale's zero-point bits cleared), then rounded to `dtype`."""
    bits = stored.contiguous().view(torch.int32)
    scale, zero = (bits & ~0xF).view(torch.float32).double(), (bits & 0xF).double()
    n = torch.stack([packed & 0xF, packed >> 4], dim=-1).flatten(-2).double()
    h, signs = hadamard(n.shape[-1])
    return (((n - zero[..., None]) * scale[..., None]) @ h * signs / n.shape[-1]).to(dtype)


def read_back(q, ks, vs, k_scales, v_scales, dtype):
    """What the kernel reads: the codes dequantized and rotated back."""
    return (q, [read_one(k, s, dtype) for k, s in zip(ks, k_scales)],
            [read_one(v, s, dtype) for v, s in zip(vs, v_scales)])
'''
