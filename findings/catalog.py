"""The catalog's rows: every committed minimal case belongs to exactly one (tests/findings/test_catalog.py).

Defects first, by library; then conventions, limitations, open cases and attnref's own fixed defects.
Result files are named relative to benchmarks/results/.
"""
from __future__ import annotations

from .model import FA4, FLASHINFER, TORCH_CPU, TORCH_CUDA, VLLM, XFORMERS, Entry, Kind

D = Kind.DEFECT
H200_FIRST = "campaigns/torch-fa4-flashinfer-h200-2026-11-22.md"
H100_TORCH = "campaigns/torch-cudnn-flex-h100-2026-11-22.md"
VLLM_KERNELS = "vllm/kernels-h100-2026-11-23.md"
VLLM_WHOLE = "vllm/whole-backends-h100-2026-11-23.md"
VLLM_RULES = "vllm/mask-rules-fa4-h100-2026-11-23.md"
VLLM_MLA = "vllm/mla-h100-2026-11-25.md"
FI_SM90 = "vllm/flashinfer-sm90-h200-2026-11-26.md"
OPEN_ROWS = "vllm/open-rows-mla-flashinfer-h100-2026-11-27.md"
UNTOLD = "reach/untold-h100-2026-11-25.md"
REACH = "reach/spellings-raw-regions-h100-2026-11-25.md"

TORCH = (
    Entry("efficient-empty-rows", D, TORCH_CUDA,
          "aten._efficient_attention_forward (SDPA memory-efficient; xformers' cutlassF-pt)",
          "Rows that see no key (a sequence without keys, or bottom-right causal with more queries than keys) are "
          "uninitialised memory: LSE 0, 1e-43, 2.4 or 1e+14 instead of -inf, output 1-5, 1e+8, inf (fp16, head 256) "
          "or NaN instead of 0. xformers' cutlassF-pt, the same kernel, gives inf to a sequence without keys.",
          ("aten-efficient-varlen-52341e1a32.json", "aten-efficient-varlen-5f7add1704.json",
           "aten-efficient-varlen-inf-output-original.json", "xformers-cutlass-empty-row-inf.json"), H100_TORCH,
          device="H200, H100"),
    Entry("xformers-fa2-no-keys-no-lse", D, f"{XFORMERS}; {TORCH_CUDA}",
          "memory_efficient_attention_partial(op=fa2F-pt), BlockDiagonalMask",
          "A call without a single key returns a 0-element LSE beside its output (torch's flash kernel under it is "
          "not launched); a sequence without keys beside others gets LSE +inf, torch flash's convention.",
          ("xformers-fa2-no-keys-no-lse.json",), REACH),
    Entry("efficient-causal-more-queries", D, TORCH_CUDA, "aten._efficient_attention_forward, custom_mask_type=2",
          "Bottom-right causal with more queries than keys: rows that do see keys are wrong (errors up to 890x the "
          "limit), beside the empty-row contract above.",
          ("aten-efficient-varlen-causal-more-queries-than-keys-rows-with-keys.json",), UNTOLD),
    Entry("sdpa-lower-right-empty-rows", D, TORCH_CUDA, "F.scaled_dot_product_attention with causal_lower_right",
          "More queries than keys: rows that see no key get a finite non-zero output (the bias's docs promise NaN "
          "there; the oracle's contract is 0).",
          ("torch-sdpa-causal-lower-right-cuda-25104c41f3.json",), H200_FIRST, device="H200"),
    Entry("flash-window-before-first-key", D, TORCH_CUDA,
          "aten._flash_attention_forward, torch.nn.attention.varlen.varlen_attn (window_size)",
          "With a window and more queries than keys, a row whose window ends before the first key returns a "
          "non-zero output (2.3-3.4) and, for window (0, unbounded), a NaN LSE, instead of 0 and -inf.",
          ("aten-flash-varlen-window-before-first-key.json", "torch-varlen-window-before-first-key.json",
           "torch-varlen-window-left0-more-queries-lse-nan.json"), H100_TORCH),
    Entry("flash-right-window-past-keys", D, TORCH_CUDA, "aten._flash_attention_forward (window_size_right)",
          "A bounded right window side at or beyond the keys is taken as unbounded: with more queries than keys the "
          "first rows, whose right bound still excludes keys, see every key (error 3.1, limit 0.05).",
          ("aten-flash-varlen-right-window-past-keys-taken-unbounded.json",), UNTOLD),
    Entry("cudnn-varlen-gqa-lse", D, TORCH_CUDA, "aten._cudnn_attention_forward (cum_seq_q / cum_seq_k)",
          "The LSE is wrong whenever query heads share kv heads (GQA / MQA); the output is right. 177 of 177 LSE "
          "mismatches had num_heads != num_kv_heads.",
          ("aten-cudnn-varlen-mqa-lse.json",), H100_TORCH),
    Entry("cudnn-varlen-empty-rows", D, TORCH_CUDA, "aten._cudnn_attention_forward",
          "A sequence without keys in a batch gets garbage rows (3.7e+19, NaN, inf) and garbage LSE.",
          ("aten-cudnn-varlen-empty-row-garbage.json",), H100_TORCH),
    Entry("cudnn-varlen-no-lse", D, TORCH_CUDA, "aten._cudnn_attention_forward",
          "A batch without any key skips the kernel and returns no LSE although compute_log_sumexp=True.",
          ("aten-cudnn-varlen-no-keys-no-lse.json",), H100_TORCH),
    Entry("flex-flash-lse-ln2", D, TORCH_CUDA, "flex_attention(kernel_options={'BACKEND': 'FLASH'}, return_lse=True)",
          "Returns LSE x ln 2: FA4's natural-log LSE converted as if it were base 2 (error / |LSE| = 1 - ln 2).",
          ("flex-flash-cuda-lse-ln2.json",), H100_TORCH,
          status="https://github.com/pytorch/pytorch/issues/181645 (fixed by pytorch#181824); in the ledger"),
    Entry("flex-flash-template-compile", D, TORCH_CUDA, "flex_attention BACKEND=FLASH (compiled)",
          "The FLASH template fails to compile valid mods: head 256 with a score_mod picks an 80-wide key tile that "
          "the 128-block mask does not divide; a soft-cap score_mod at head 64 raises 'Expected TensorSSA'.",
          ("flex-flash-cuda-block-tile-80.json", "flex-flash-cuda-tensorssa.json"), H100_TORCH),
    Entry("flex-compiled-dynamic-soft-cap", D, TORCH_CUDA, "torch.compile(flex_attention, dynamic=True), CUDA",
          "A soft-cap score_mod fails to lower (LoweringException: unbacked_bindings) on a one-token case.",
          ("flex-compiled-cuda-418382be58.json",), H200_FIRST, device="H200"),
    Entry("flex-compiled-cpu-dynamic", D, TORCH_CPU, "torch.compile(flex_attention, dynamic=True), CPU",
          "Inductor's C++ kernel fails to compile ('cur_kvSplitSizeN' was not declared) for the document mask over "
          "packed sequences of unequal lengths and for a window mask against a captured int; ('cur_qSplitSize8' was "
          "not declared) for an ALiBi score_mod with a window (encoder) or with GQA and a top-left causal mask. A "
          "soft-cap score_mod with a one-token window fails to lower (LoweringException: unbacked_bindings), as on "
          "CUDA. The three later ones came from `make fuzz` (60 s, CPU) and replay alike.",
          ("flex-compiled-cpu-three-keys-compile-error.json", "flex-compiled-cpu-window-compile-error.json",
           "flex-compiled-cpu-alibi-window-qsplit-compile-error.json",
           "flex-compiled-cpu-alibi-gqa-top-left-qsplit-compile-error.json",
           "flex-compiled-cpu-soft-cap-window-unbacked-bindings.json"),
          "campaigns/compile-slices-sanitizer-h100-2026-11-23.md", repro="flex-compiled-cpu-dynamic.py",
          device="CPU (x86_64)"),
    Entry("flex-zero-keys", D, TORCH_CUDA, "flex_attention (eager and compiled)",
          "A packed key length of 0 raises IndexError instead of returning empty rows.",
          ("flex-cuda-6b114a1e17.json",), H200_FIRST, device="H200",
          status="https://github.com/pytorch/pytorch/pull/147010; in the ledger"),
    Entry("cpu-flash-sigfpe", D, TORCH_CPU, "aten._scaled_dot_product_flash_attention_for_cpu",
          "A sequence with 0 queries or 0 keys kills the process with SIGFPE (never launched: the ledger writes "
          "the row as a known crash).",
          ("torch-sdpa-cpu-flash-zero-keys-sigfpe.json",), device="CPU (x86_64)",
          status="https://github.com/pytorch/pytorch/issues/141219 (closed, still reproduces); in the ledger"),
)

FA4_ROWS = (
    Entry("fa4-paged-head-v", D, FA4, "flash_attn.cute.flash_attn_varlen_func with page_table",
          "head_dim != head_dim_v through page_table gives wrong output that changes between identical runs "
          "(error 0.41-0.72, limits 0.01-0.05); the same shapes through cu_seqlens pass.",
          ("fa4-paged-b6aefceeda.json", "fa4-paged-mismatch-original.json"), H200_FIRST, device="H200, H100"),
    Entry("fa4-illegal-access-small-head", D, FA4, "flash_attn.cute.flash_attn_varlen_func",
          "Illegal memory access (sticky) for head 32 with value 80 or 112 (varlen and paged), and for value 80 with "
          "sinks and soft-cap through page_table.",
          ("fa4-paged-illegal-access-32-112.json", "fa4-varlen-e736f50c26.json",
           "fa4-paged-head-v80-sinks-soft-cap-illegal-access.json"), H200_FIRST, device="H200, H100"),
    Entry("fa4-paged-head160", D, FA4, "flash_attn_varlen_func with page_table, raw-API cases",
          "Head 160 with more queries than keys: an illegal memory access (compute-sanitizer: invalid __shared__ "
          "write of 16 bytes, 192 errors) and, without a window, a 13x mismatch.",
          ("fa4-paged-kernel-head160-more-queries-mismatch.json", "fa4-paged-kernel-head160-illegal-access.json"),
          "false-alarms/torch-xformers-jit-h100-2026-11-23.md"),
    Entry("fa4-paged-head-80-96", D, FA4, "flash_attn_varlen_func with page_table",
          "Output mismatches through page_table at head 80 / 96 (sinks, soft-cap, cross attention with GQA 8; "
          "head_size == head_size_v; not analysed).",
          ("fa4-paged-c646e80ad5.json", "fa4-paged-d35adea4ee.json", "fa4-paged-77afc0eae7.json",
           "fa4-paged-fd82987561.json", "fa4-paged-cross-f16-head96-gqa8-mismatch.json"), VLLM_WHOLE),
    Entry("fa4-sink-overflow", D, FA4, "Softmax.finalize (learnable_sink)",
          "A sink 88.72 (128 ln 2) above every score of a row overflows float32: LSE +inf (the sink is folded in "
          "after the key loop, the running max never taking it in).",
          ("fa4-paged-sink-100-lse-inf.json",), "campaigns/fa4-flex-xformers-10k-h100-2026-11-24.md",
          status="https://github.com/Dao-AILab/flash-attention/pull/2752 (raised in its review); in the ledger"),
    Entry("fa4-sm90-registers", D, FA4, "flash_attn_varlen_func, SM90",
          "Head 64 with value 256, GQA, sinks and soft-cap fails to build: PTX 'Insufficient registers (128)'.",
          ("fa4-paged-sm90-head64-v256-insufficient-registers.json",), UNTOLD),
)

FLASHINFER_ROWS = (
    Entry("flashinfer-sinks-ignored", D, FLASHINFER,
          "BatchDecodeWithPagedKVCacheWrapper (CUDA-core), BatchPrefillWithPagedKVCacheWrapper fa2 / fa3",
          "run(..., sinks=s) is silently ignored: the output is exactly the attention without sinks (one query, "
          "one key, sink 0: v instead of v / 2). The control case is the same case without sinks.",
          ("flashinfer-decode-1bbb6d1cfe.json", "flashinfer-decode-18c041469b.json",
           "flashinfer-decode-head256-sinks-mismatch.json", "flashinfer-prefill-fa2-18c041469b.json",
           "flashinfer-prefill-fa3-sinks-ignored.json", "flashinfer-decode-control-no-sinks.json"), H200_FIRST,
          device="H200, H100"),
    Entry("flashinfer-no-keys-sink-lse", D, FLASHINFER, "BatchPrefillWithPagedKVCacheWrapper fa2 / fa3",
          "A sequence with no keys and a sink returns a NaN LSE (expected: the sink's logit, output 0).",
          ("flashinfer-prefill-fa2-3ebe608284.json", "flashinfer-prefill-fa2-nan-original.json",
           "flashinfer-prefill-fa3-no-keys-sink-nan-lse.json"), H200_FIRST, device="H200, H100"),
    Entry("flashinfer-alibi-soft-cap", D, FLASHINFER, "DefaultAttention (decode and prefill)",
          "With ALiBi and a logits soft-cap together the scores are scaled by sm_scale twice and the bias goes "
          "inside the tanh (errors up to 43x the limit; a model of it predicts 2,672 of 2,672 failing rows).",
          ("flashinfer-decode-alibi-soft-cap-double-scale.json",),
          "campaigns/flashinfer-alibi-softcap-10k-h100-2026-11-24.md", repro="flashinfer-alibi-soft-cap-scale.py"),
    Entry("flashinfer-fp8-prefill-soft-cap", D, FLASHINFER,
          "BatchPrefillWithPagedKVCacheWrapper on sm90 with an fp8 query and cache (DefaultFP8Attention)",
          "The logits soft-cap is dropped: the sm90 fp8 variant (DefaultFP8Attention = StandardFP8Attention, "
          "hopper/variants.cuh) has no soft-cap transform. Reached through vLLM's FLASHINFER, whose sm90 prefills over "
          "an e4m3 cache run with an fp8 query: 748 of 1,159 such rows with a soft-cap mismatched (up to 3,527x the "
          "limit; caps 0.5-5: 613 of 643, cap 10,000: 1 of 149), and at the worst element of 741 of the 748 the "
          "kernel's value is the attention without the cap.",
          ("vllm-backend-flashinfer-fp8-prefill-soft-cap-dropped.json",), FI_SM90, device="H200"),
)

VLLM_ROWS = (
    Entry("vllm-unified-window-running-max", D, VLLM,
          "triton_unified_attention (2D path) with a sliding window, under vLLM's Attention layer",
          "A Q block's tile loop starts at its first query's window (compute_tile_loop_bounds), so a later query of the "
          "block can meet a tile with none of its keys; softmax_step then sets that row's running max to 0 "
          "(m_j > -inf else 0) and keeps it there while the row's scores are negative: its weights are exp(s), not "
          "exp(s - max), and P.to(V.dtype) rounds them (to e4m3 with the layer's fp8 query, to float16 otherwise) "
          "while L sums them in float32. Outputs are off by up to 3,096x the limit, and 0 where every weight rounds "
          "to 0 (float16 fp8-query rows: 0 for 2.94, 0 for -26). A CPU emulation of the loop as the source reads "
          "gives the kernel's recorded value to the last bit in 22 of 23 cases, and the oracle's without the reset.",
          ("vllm-layer-triton-fp8-window-running-max-reset.json", "vllm-layer-triton-fp8-window-zero-output.json",
           "vllm-layer-triton-fp8-window-soft-cap-zero-output.json", "vllm-layer-triton-window-one-key-ulp.json"), "vllm/triton-window-running-max-2026-11-26.md",
          device="H200"),
    Entry("vllm-unified-soft-cap-nan", D, VLLM, "triton_unified_attention (apply_softcap)",
          "The soft-cap is computed from exp of both signs instead of tanh: NaN once |S / cap| > ~88.",
          ("vllm-triton-unified-soft-cap-nan.json", "vllm-triton-unified-ea78f6f1a1.json",
           "vllm-backend-triton-eefc7e5613.json", "vllm-backend-triton-d4aceebfc6.json",
           "vllm-backend-triton-a619ba3a15.json"), VLLM_KERNELS),
    Entry("vllm-unified-empty-rows-nan", D, VLLM, "triton_unified_attention (2D and 3D paths)",
          "A row that sees no key gets NaN, not 0.",
          ("vllm-triton-unified-3d-no-keys-nan.json", "vllm-triton-unified-2d-row-without-keys-nan.json",
           "vllm-triton-unified-e5cf5949fa.json"), VLLM_KERNELS),
    Entry("vllm-unified-alibi-anchor", D, VLLM, "triton_unified_attention (ALiBi)",
          "The ALiBi bias is slope x (k - context_len), anchored at the first new token instead of the query: the "
          "per-row constant cancels without sinks, and with sinks every row after the first is wrong.",
          ("vllm-triton-unified-alibi-sinks-anchor.json", "vllm-backend-triton-2fc8b8ace7.json",
           "vllm-backend-triton-49924d9825.json", "vllm-backend-triton-bc1e15d314.json"), VLLM_KERNELS),
    Entry("vllm-prefix-prefill-alibi-window", D, VLLM, "prefix_prefill.context_attention_fwd (_fwd_kernel_alibi)",
          "With alibi_slopes the sliding window is silently ignored (also through chunked_prefill_paged_decode).",
          ("vllm-prefix-prefill-alibi-ignores-window.json", "vllm-prefix-prefill-alibi-window-mismatch.json",
           "vllm-chunked-paged-decode-036dbda0c9.json"), VLLM_KERNELS),
    Entry("vllm-fa3-sink-lse-nan", D, VLLM, "vllm_flash_attn FA3 with s_aux",
          "The LSE is NaN when the sink dominates a row: a row with no keys and a sink, or a sink 100 above the scores.",
          ("vllm-fa3-paged-sink-no-keys-lse-nan.json", "vllm-fa3-paged-sink-100-lse-nan.json"), VLLM_KERNELS,
          moved=(("vllm-fa3-paged-sink-100-lse-nan.json",
                  "recorded with encoding writer=cuda, which vllm-fa3-paged no longer draws (the write is judged by "
                  "vllm-fa3-writes-cache); replay it there or drop the encoding"),)),
    Entry("vllm-fa3-page256-canary", D, VLLM, "vllm_flash_attn FA3, 256-token pages",
          "A NaN in an unused slot of a partly used 256-token page reaches the output (FA3 loads whole pages and "
          "multiplies by probability 0).",
          ("vllm-fa3-paged-page256-canary-nan.json", "vllm-fa3-paged-fp8-page256-nan.json"), VLLM_KERNELS),
    Entry("vllm-fa3-page256-window", D, VLLM, "vllm_flash_attn FA3, 256-token pages, sliding window",
          "Outputs wrong by 3.5-19x the limit when a window starts inside a 256-token page (finite canaries).",
          ("vllm-fa3-page256-window-mismatch.json", "vllm-fa3-page256-window-sinks-mismatch.json"), VLLM_KERNELS),
    Entry("vllm-unified-fp16-masked-tile", D, VLLM, "triton_unified_attention (softmax_step), float16",
          "A tile fully masked for a row sets its running max to 0, and exp(S - 0) underflows in float16 when the "
          "row's visible scores are all below about -17: output 0 while L is not (window 2, R-SWA).",
          ("vllm-triton-unified-fp16-masked-tile-underflow-min.json", "vllm-triton-unified-1a0f43dc5f.json",
           "vllm-triton-unified-rswa-fp16-underflow.json"), VLLM_RULES),
    Entry("vllm-cascade-sink-nan", D, VLLM, "FlashAttentionBackend (FLASH_ATTN) cascade attention",
          "Cascade attention over a shared prefix with a sink ~100 above the scores gives NaN / wrong outputs: FA3's "
          "NaN LSE reaches cascade's LSE merge (cascade off: pass).",
          ("vllm-backend-flash-903ca3b289.json", "vllm-backend-flash-f06e239366.json"), VLLM_WHOLE),
    Entry("vllm-unified-prefix-lm-window-v", D, VLLM, "triton_unified_attention (mm_prefix_range)",
          "PrefixLM ranges with a sliding window: values of range keys beyond the window are zeroed while their "
          "probability is kept.",
          ("vllm-triton-unified-prefix-lm-window-v-zeroed-min.json", "vllm-triton-unified-prefix-lm-window-v-zeroed.json"),
          VLLM_RULES),
    Entry("vllm-unified-prefix-lm-phantom", D, VLLM, "triton_unified_attention (mm_prefix_range)",
          "A PrefixLM range reaching past the sequence's current length adds phantom keys of score 0 and value 0.",
          ("vllm-triton-unified-prefix-lm-range-past-seq-len-min.json",
           "vllm-triton-unified-prefix-lm-range-past-seq-len.json"), VLLM_RULES),
    Entry("vllm-unified-noncausal-window-v", D, VLLM, "triton_unified_attention, non-causal window",
          "Keys right of a query block's later rows get value 0 (the V-zeroing tests the block's first query).",
          ("vllm-triton-unified-noncausal-window-v-zeroed-min.json", "vllm-triton-unified-noncausal-window-v-zeroed.json"),
          VLLM_RULES),
    Entry("vllm-int4-drops-mask-rules", D, VLLM, "unified_attention -> unified_attention_int4",
          "An int4 cache is handed on without chunk_lookback, rswa_prefix_lens and rswa_window: chunked-local and "
          "R-SWA layers silently attend over the plain window.",
          ("vllm-triton-unified-int4-chunk-lookback-ignored.json", "vllm-triton-unified-int4-rswa-ignored.json"),
          "vllm/int4-cache-h100-2026-11-23.md", repro="vllm-int4-drops-mask-rules.py"),
    Entry("vllm-hadacore-tail-rows", D, VLLM, "hadacore_transform (int4 cache writer)",
          "Wrong, run-to-run different values in the last rows at 9-62 rows (the issue reports > 8,192): about 1 "
          "in 10 int4 writes hold codes 7-15 quanta off.",
          ("vllm-pth-writes-cache-int4-hadacore-tail-rows.json",), "vllm/int4-cache-h100-2026-11-23.md",
          repro="vllm-hadacore-tail-rows.py",
          status="https://github.com/vllm-project/vllm/issues/57014 (larger inputs); in the ledger"),
    Entry("vllm-dcp-combine-head-size", D, VLLM, "correct_attn_out, dcp_a2a_lse_reduce (DCP combine)",
          "Fails to compile for head sizes that are not powers of two (96, 192: tl.arange(0, HEAD_DIM)).",
          ("vllm-fa3-cp-dcp-combine-head96.json",), "vllm/context-parallel-flex-h100-2026-11-24.md",
          repro="vllm-dcp-combine-head-size.py"),
    Entry("vllm-flex-prefix-lm-pruned", D, VLLM, "FlexAttentionBackend (direct block mask)",
          "The block mask prunes blocks by causal order and window only, so PrefixLM ranges never reach keys in "
          "pruned blocks (a model of it reproduces 72 of 72 mismatch rows).",
          ("vllm-backend-flex-prefix-lm-future-block-pruned.json", "vllm-backend-flex-prefix-lm-window-block-pruned.json"),
          "vllm/context-parallel-flex-h100-2026-11-24.md"),
    Entry("vllm-flex-fp32-head256", D, VLLM, "FlexAttentionBackend, float32",
          "Head 256 at block size 64 cannot compile (no valid Triton config: shared memory).",
          ("vllm-backend-flex-fp32-head256-shared-memory.json",), "vllm/context-parallel-flex-h100-2026-11-24.md"),
    Entry("vllm-decode-mha-bf16-products", D, VLLM, "triton_decode_attention.decode_attention_fwd (MHA path)",
          "q.k is summed from bf16 products (tl.sum(q * k); the grouped path uses tl.dot): all 60 mismatches of "
          "19,509 decode examples were MHA rows, up to 7.8x the limit. The MLA decode (is_mla=True) with one query "
          "head takes the same path: every one of its mismatches had one head, and so did all 32 decode mismatches of "
          "TRITON_MLA under vLLM's MLA layer (8 with an fp8 cache; vllm/mla-layer-h200-2026-11-26.md).",
          ("vllm-triton-decode-mha-bf16-products.json", "vllm-triton-mla-mha-bf16-products.json",
           "vllm-layer-triton-mla-mha-bf16-products.json", "vllm-layer-triton-mla-mha-fp8.json"),
          "campaigns/flashinfer-alibi-softcap-10k-h100-2026-11-24.md"),
    Entry("vllm-flashmla-fp8-zero-keys", D, VLLM, "v1/attention/ops/flashmla.flash_mla_with_kvcache_fp8 (FLASHMLA, fp8)",
          "A sequence with 0 cached keys (vLLM pads CUDA-graph batches so) makes an illegal memory access, or when it "
          "survives garbage rows up to 3.4e+38; the 16-bit path returns 0 and LSE +inf there. vllm 0.26.0's builder "
          "does not clamp seq_lens.",
          ("vllm-flashmla-fp8-zero-keys-illegal-access.json", "vllm-flashmla-fp8-zero-keys-garbage-rows.json"), VLLM_MLA,
          status="https://github.com/vllm-project/vllm/issues/33664 (fix proposed: vllm#35969); in the ledger"),
    Entry("vllm-flashmla-fp8-long-queries", D, VLLM,
          "v1/attention/ops/flashmla.flash_mla_with_kvcache_fp8 (vLLM's dense fp8 FlashMLA extension; FLASHMLA's "
          "decode, fp8 cache)",
          "In causal batches with many query rows per sequence, the rows of early queries, whose causal horizon lies "
          "in the first one or two 64-key blocks, are wrong, the same on every run: output off by up to 4.2 and LSE "
          "by up to 8.8, neither the causal nor the unmasked attention. Within vLLM's reach (FLASHMLA decodes up to "
          "128 queries per sequence): 12 of the 24 grid points of 100-128 queries after 1-100 cached keys with 16 or "
          "128 heads fail at 1.6-7.2x (none with 4 heads; tools/probe-flashmla-rows.py --grid), and through vLLM's "
          "own MLA layer batches of 127-128-query decodes after 0-64 cached keys failed at up to 25x (22 cases). 129 "
          "or more queries fail with no context at 4 heads too; one sequence, 1-2 heads, 500 cached keys and the "
          "16-bit kernel over the same inputs pass.",
          ("vllm-flashmla-fp8-long-queries-edge-values.json", "vllm-layer-flashmla-fp8-128-queries-after-one-key.json"),
          OPEN_ROWS, status="not reported; a candidate cause of https://github.com/vllm-project/vllm/issues/38652 "
          "(FLASHMLA, fp8 cache, H100: multi-turn conversations degrade to garbage, single turns do not; open), not "
          "confirmed"),
    Entry("vllm-fa3-mla-canary", D, VLLM, "vllm_flash_attn FA3 with q_v (FLASH_ATTN_MLA), headdim 64 / 512",
          "When one kv head serves more than 64 query rows (queries x heads), a NaN in an unused slot of the last "
          "page reaches the output (FA3 loads the page and multiplies by probability 0): 1,124 of 1,124 NaN rows had "
          "NaN in unused slots; with finite stale values the same shapes are right. Through vLLM's own MLA layer "
          "(vllm-layer-flash-attn-mla, H200): 1,449 of 6,350 batches with more than 64 query rows, and none below.",
          ("vllm-fa3-mla-canary-nan.json", "vllm-fa3-mla-canary-nan-seven-heads.json",
           "vllm-layer-flash-attn-mla-canary-nan.json"), VLLM_MLA),
    Entry("vllm-flashinfer-e5m2-prefill-query", D, VLLM,
          "FlashInferImpl.forward on sm90 (get_q_data_type, maybe_quant_query), fp8_e5m2 cache",
          "With an fp8_e5m2 KV cache every batch with a prefill fails: the builder plans the prefill wrapper with "
          "q_data_type float8_e5m2 (the cache's dtype), the impl quantizes the prefill's query with scaled_fp8_quant, "
          "which makes float8_e4m3fn, and FlashInfer's run raises 'The dtype of q torch.float8_e4m3fn does not match "
          "the q_data_type torch.float8_e5m2'. Whole and under vLLM's layer, 1,190 of the 1,193 e5m2 rows with a "
          "prefill failed so (3 hit the 240-s example timeout); none of the 1,214 decode-only e5m2 rows failed.",
          ("vllm-backend-flashinfer-e5m2-prefill-query-dtype.json", "vllm-layer-flashinfer-e5m2-prefill-query-dtype.json"),
          FI_SM90, device="H200",
          moved=tuple((case, "a prefill over an e5m2 cache, which FLASHINFER's declaration no longer draws (its fp8 "
                             "query, e4m3 only, comes with prefills)")
                      for case in ("vllm-backend-flashinfer-e5m2-prefill-query-dtype.json",
                                   "vllm-layer-flashinfer-e5m2-prefill-query-dtype.json"))),
)
