"""Control scripts for tools/gpu-repro.sh: for every backend with a repro template, `attnref repro` of a plain case
its declaration takes (no finding expected), as control-<backend>.py in the folder given. A template that calls
its kernel wrongly shows here as a control that does not exit 0, so a reproducer's exit 1 is the kernel's."""
import pathlib
import sys
from dataclasses import replace

from backends.registry import builtin_backends
from reference.case import BlockTableKind, CacheSpec, Case, DType, KVCacheDType, KVLayout, Quant, SequenceSpec
from reports.repro import ReproUnsupported, write_repro

PLAIN = (Case(sequences=(SequenceSpec(query_len=5, context_len=40), SequenceSpec(query_len=3, context_len=17)),
              num_heads=4, num_kv_heads=2, head_size=128, dtype=DType.BFLOAT16, seed=7),
         Case(sequences=(SequenceSpec(query_len=1, context_len=40), SequenceSpec(query_len=1, context_len=17)),
              num_heads=4, num_kv_heads=2, head_size=128, dtype=DType.BFLOAT16, seed=7))


QUANTIZED = (KVCacheDType.FP8_E4M3, KVCacheDType.INT8_PER_TOKEN_HEAD, KVCacheDType.FP8_PER_TOKEN_HEAD,
             KVCacheDType.INT4_PER_TOKEN_HEAD)


def control(backend, kvd: KVCacheDType = KVCacheDType.AUTO) -> Case | None:
    caps = backend.caps
    layout = KVLayout.FLASH_NHD if KVLayout.FLASH_NHD in caps.kv_layouts else min(caps.kv_layouts, default=KVLayout.FLASH_NHD)
    quant = Quant(kvd) if not kvd.is_fp8 else Quant(kvd, k_scales=(0.02,), v_scales=(0.02,), q_fp8_scale=0.02)
    for case in PLAIN:
        if caps.requires_cache or caps.reads_paged_cache:
            block_size = caps.block_sizes[0] if caps.block_sizes else 16
            cache = CacheSpec(layout=layout, block_size=block_size, finite_canaries=caps.finite_canaries_only, quant=quant)
            if layout == KVLayout.MLA_LATENT:  # one latent head: DeepSeek's 512 + 64
                case = replace(case, num_heads=16, num_kv_heads=1, head_size=576, head_size_v=512)
                if caps.head_size_pairs:  # an MLA layer: its first (latent + rope, value) pair, its query zero there
                    (d, dv), zero = caps.head_size_pairs[0], dict(caps.query_zero_dims).get(caps.head_size_pairs[0])
                    case = replace(case, head_size=d, head_size_v=dv, values=replace(case.values, query_zero_dims=zero))
            if BlockTableKind.CONTIGUOUS not in caps.block_tables:  # a cascade: the first 16 keys shared
                cache = replace(cache, table=BlockTableKind.SHARED_PREFIX, prefix_blocks=-(-16 // block_size))
            try:
                case = replace(case, cache=cache)
            except ValueError:  # CaseError: a cache dtype this layout does not hold
                return None
        elif kvd != KVCacheDType.AUTO:
            return None
        variants = [case]
        if kvd.is_fp8:  # with and without an fp8 query
            variants.append(replace(case, cache=replace(case.cache, quant=replace(quant, q_fp8_scale=None))))
        for variant in variants:
            if not backend.not_supported_reasons(variant):
                return variant
    return None


folder = pathlib.Path(sys.argv[1])
for backend in builtin_backends():
    for kvd in (KVCacheDType.AUTO,) + (QUANTIZED if backend.repro_quantized else ()):
        case = control(backend, kvd)
        if case is None:
            continue
        suffix = "" if kvd == KVCacheDType.AUTO else f"-{kvd.value}"
        try:
            (folder / f"control-{backend.name}{suffix}.py").write_text(write_repro(case, backend.name))
        except ReproUnsupported:
            pass
