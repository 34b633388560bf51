"""Parameter counts from a config's weight shapes, per architecture, and the bytes they
take under the config's quantisation. Each weight is a :class:`Tensor` with the group it
belongs to, so quantisation and MoE routing can treat groups apart."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sim.models.hf_config import _Fields

LINEAR_GROUPS = ("attn", "mlp", "expert", "shared", "mamba")
"""Groups of matrices a weight quantisation converts (embeddings, LM head, norms, biases
and routers stay in the model dtype)."""


@dataclass(frozen=True, slots=True)
class Tensor:
    rows: int
    cols: int
    group: str
    """``embed``, ``lm_head``, ``norm``, ``bias``, ``router``, or one of LINEAR_GROUPS."""
    active_share: float = 1.0
    """Share of it one token touches (routed experts: k / E)."""

    @property
    def numel(self) -> int:
        return self.rows * self.cols


@dataclass
class Counted:
    tensors: list[Tensor] = field(default_factory=list)
    tied: bool = False
    """Tied embeddings: the table is also the LM head (a matmul every token)."""

    def add(self, rows: int, cols: int, group: str, active_share: float = 1.0) -> None:
        if rows and cols:
            self.tensors.append(Tensor(rows, cols, group, active_share))

    @property
    def total(self) -> int:
        return sum(t.numel for t in self.tensors)

    @property
    def active(self) -> int:
        """Parameters a token's matmuls use: all but the embedding table (a lookup) and
        the routed experts it is not sent to."""
        return round(
            sum(t.numel * t.active_share for t in self.tensors if t.group != "embed")
        ) + sum(t.numel for t in self.tensors if t.group == "embed" and self.tied)

    def weight_format(self, f: _Fields) -> str:
        q = f.get("quantization_config")
        if not q:
            return "bf16" if f.get("torch_dtype", "bfloat16") == "bfloat16" else "fp16/fp32"
        method = q.get("quant_method") if isinstance(q, dict) else None
        if method == "fp8":
            block = q.get("weight_block_size")
            return f"fp8 (block scales {block})" if block else "fp8 (per-tensor scales)"
        if method == "mxfp4":
            return "mxfp4 experts (4.25 bits), the rest bf16"
        if method in ("gptq", "awq"):
            return f"W{q.get('bits', 4)}A16 ({method}, group {q.get('group_size', 128)})"
        raise f.fail(
            f"field 'quantization_config.quant_method': {method!r} not known; "
            "known: fp8, mxfp4, gptq, awq"
        )

    def weights_bytes(self, f: _Fields, dtype_bytes: int) -> int:
        """Bytes of every weight as stored: quantised groups at their format's bits plus
        their scales, the rest at ``dtype_bytes``."""
        fmt = self.weight_format(f)
        q = f.get("quantization_config") or {}
        total = 0.0
        for t in self.tensors:
            n = t.numel
            if fmt.startswith("fp8") and t.group in LINEAR_GROUPS:
                block = q.get("weight_block_size")
                if block:
                    br, bc = int(block[0]), int(block[1])
                    total += n + 4 * (-(-t.rows // br)) * (-(-t.cols // bc))
                else:
                    total += n + 4
            elif fmt.startswith("mxfp4") and t.group == "expert":
                total += n * 17 / 32  # 4-bit values + one e8m0 scale byte per 32
            elif fmt.startswith("W") and t.group in LINEAR_GROUPS:
                bits, group = int(q.get("bits", 4)), int(q.get("group_size", 128))
                total += n * bits / 8 + (n / group) * (2 + bits / 8)  # fp16 scale + zero
            else:
                total += n * dtype_bytes
        return round(total)


def count_params(f: _Fields) -> Counted:
    """Every weight of the language model the config describes (vision towers and
    multi-token-prediction layers are not counted; docs/hardware-latency.md)."""
    c = Counted()
    hidden, vocab = f.int("hidden_size"), f.int("vocab_size")
    layers = f.int("num_hidden_layers")
    mt = f.model_type
    tied_default = mt == "gemma3_text"
    tied = bool(f.get("tie_word_embeddings", tied_default))
    c.tied = tied
    c.add(vocab, hidden, "embed")
    if not tied:
        c.add(vocab, hidden, "lm_head")
    c.add(1, hidden, "norm")
    if mt == "deepseek_v3":
        _deepseek(c, f, hidden, layers)
    elif mt == "nemotron_h":
        _nemotron_h(c, f, hidden)
    elif mt == "jamba":
        _jamba(c, f, hidden, layers)
    else:
        for i in range(layers):
            _attention(c, f, hidden)
            _mlp(c, f, hidden, i)
            c.add(4 if mt == "gemma3_text" else 2, hidden, "norm")
    return c


def _attention(c: Counted, f: _Fields, hidden: int) -> None:
    heads = f.int("num_attention_heads")
    kv = f.int("num_key_value_heads", heads)
    hd = f.int("head_dim", hidden // heads if heads else None)
    c.add(hidden, heads * hd, "attn")
    c.add(hidden, 2 * kv * hd, "attn")
    c.add(heads * hd, hidden, "attn")
    mt = f.model_type
    if mt == "qwen2":
        c.add(1, (heads + 2 * kv) * hd, "bias")
    elif f.get("attention_bias", False):
        c.add(1, (heads + 2 * kv) * hd + hidden, "bias")
    if mt in ("qwen3", "qwen3_moe", "gemma3_text"):
        c.add(2, hd, "norm")  # q_norm, k_norm
    if mt == "gpt_oss":
        c.add(1, heads, "bias")  # attention sinks


def _mlp(c: Counted, f: _Fields, hidden: int, i: int) -> None:
    mt = f.model_type
    if mt == "gpt_oss":
        e, k, m = (
            f.int("num_local_experts"),
            f.int("num_experts_per_tok"),
            f.int("intermediate_size"),
        )
        c.add(hidden, e, "router")
        c.add(1, e, "bias")
        c.add(e * hidden, 2 * m, "expert", k / e)  # gate_up_proj
        c.add(e * m, hidden, "expert", k / e)  # down_proj
        c.add(1, e * (2 * m + hidden), "bias", k / e)
        return
    if mt == "qwen3_moe":
        step = f.int("decoder_sparse_step", 1)
        only_mlp = f.get("mlp_only_layers") or []
        if i not in only_mlp and step and (i + 1) % step == 0:
            e, k = f.int("num_experts"), f.int("num_experts_per_tok")
            m = f.int("moe_intermediate_size")
            c.add(hidden, e, "router")
            c.add(e * hidden, 3 * m, "expert", k / e)
            return
    c.add(hidden, 3 * f.int("intermediate_size"), "mlp")


def _deepseek(c: Counted, f: _Fields, hidden: int, layers: int) -> None:
    heads = f.int("num_attention_heads")
    nope, rope, v = f.int("qk_nope_head_dim"), f.int("qk_rope_head_dim"), f.int("v_head_dim")
    rank_kv = f.int("kv_lora_rank")
    rank_q = f.get("q_lora_rank")
    dense = f.int("first_k_dense_replace", 0)
    freq = f.int("moe_layer_freq", 1)
    for i in range(layers):
        if rank_q:
            c.add(hidden, int(rank_q), "attn")
            c.add(1, int(rank_q), "norm")
            c.add(int(rank_q), heads * (nope + rope), "attn")
        else:
            c.add(hidden, heads * (nope + rope), "attn")
        c.add(hidden, rank_kv + rope, "attn")
        c.add(1, rank_kv, "norm")
        c.add(rank_kv, heads * (nope + v), "attn")
        c.add(heads * v, hidden, "attn")
        c.add(2, hidden, "norm")
        if i >= dense and freq and i % freq == 0:
            e, k = f.int("n_routed_experts"), f.int("num_experts_per_tok")
            m = f.int("moe_intermediate_size")
            c.add(hidden, e, "router")
            c.add(1, e, "bias")  # e_score_correction_bias
            c.add(e * hidden, 3 * m, "expert", k / e)
            c.add(f.int("n_shared_experts", 0) * hidden, 3 * m, "shared")
        else:
            c.add(hidden, 3 * f.int("intermediate_size"), "mlp")


def _nemotron_h(c: Counted, f: _Fields, hidden: int) -> None:
    pattern = f.get("hybrid_override_pattern")
    if not isinstance(pattern, str):
        raise f.fail("field 'hybrid_override_pattern' missing (needed for nemotron_h)")
    if "E" in pattern:
        raise f.fail("field 'hybrid_override_pattern': MoE blocks (E) are not read yet")
    heads = f.int("num_attention_heads")
    kv = f.int("num_key_value_heads", heads)
    hd = f.int("head_dim", f.get("attention_head_dim") or hidden // max(heads, 1))
    mh, mp = f.int("mamba_num_heads"), f.int("mamba_head_dim")
    state, groups, kernel = f.int("ssm_state_size"), f.int("n_groups"), f.int("conv_kernel")
    inner = mh * mp
    conv_dim = inner + 2 * groups * state
    for ch in pattern:
        c.add(1, hidden, "norm")
        if ch == "M":
            c.add(hidden, 2 * inner + 2 * groups * state + mh, "mamba")  # in_proj
            c.add(conv_dim, kernel, "norm")  # conv1d weight (small, kept in dtype)
            if f.get("use_conv_bias", True):
                c.add(1, conv_dim, "bias")
            c.add(3, mh, "bias")  # dt_bias, A_log, D
            c.add(1, inner, "norm")
            c.add(inner, hidden, "mamba")  # out_proj
        elif ch == "*":
            c.add(hidden, (heads + 2 * kv) * hd, "attn")
            c.add(heads * hd, hidden, "attn")
        elif ch == "-":
            c.add(hidden, 2 * f.int("intermediate_size"), "mlp")  # up, down (relu^2)


def _jamba(c: Counted, f: _Fields, hidden: int, layers: int) -> None:
    """Jamba: attention every ``attn_layer_period``-th layer (from ``attn_layer_offset``),
    Mamba-1 elsewhere; MoE every ``expert_layer_period``-th layer (from its offset)."""
    heads = f.int("num_attention_heads")
    kv = f.int("num_key_value_heads", heads)
    hd = hidden // max(heads, 1)
    period, offset = f.int("attn_layer_period"), f.int("attn_layer_offset")
    e_period, e_offset = f.int("expert_layer_period"), f.int("expert_layer_offset")
    inner = f.int("mamba_expand") * hidden
    state, conv = f.int("mamba_d_state"), f.int("mamba_d_conv")
    rank = f.get("mamba_dt_rank", "auto")
    dt_rank = -(-hidden // 16) if rank == "auto" else f.int("mamba_dt_rank")
    ffn = f.int("intermediate_size")
    proj_bias = bool(f.get("mamba_proj_bias", False))
    for i in range(layers):
        c.add(2, hidden, "norm")  # input and pre-feed-forward norms
        if period and i % period == offset:
            c.add(hidden, (heads + 2 * kv) * hd, "attn")
            c.add(heads * hd, hidden, "attn")
        else:
            c.add(hidden, 2 * inner, "mamba")  # in_proj
            c.add(inner, conv, "norm")  # depthwise conv1d weight
            if f.get("mamba_conv_bias", True):
                c.add(1, inner, "bias")
            c.add(inner, dt_rank + 2 * state, "mamba")  # x_proj
            c.add(dt_rank, inner, "mamba")  # dt_proj
            c.add(1, inner, "bias")  # dt_proj bias
            c.add(inner, state, "norm")  # A_log
            c.add(1, inner, "norm")  # D
            c.add(1, dt_rank + 2 * state, "norm")  # dt, B, C layer norms
            c.add(inner, hidden, "mamba")  # out_proj
            if proj_bias:
                c.add(1, 2 * inner + hidden, "bias")
        if e_period and i % e_period == e_offset:
            e, k = f.int("num_experts"), f.int("num_experts_per_tok")
            c.add(hidden, e, "router")
            c.add(e * hidden, 3 * ffn, "expert", k / e)
        else:
            c.add(hidden, 3 * ffn, "mlp")
