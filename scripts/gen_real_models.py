"""Generate the real-model HLO programs of ``tests/data/real_models/`` (issue 9's verdict tests).

Each program is built with libraries written by others (keras-hub backbones with small random configs, an
optax AdamW training step, flax and equinox layers), lowered with ``jax.jit`` and compiled by XLA for an H200
without a GPU (the jax CUDA plugin's deviceless compile, as ``../shared/tools/jax_gpu_hlo`` does). For each
program NAME it writes:

* ``NAME.h200_opt.hlo``: the module after XLA:GPU's optimizer (what ``fusegen run`` takes);
* ``NAME.inputs.npz``: the real initial weights and inputs, ``p0``, ``p1``, ... in entry-parameter order;
* ``NAME.expected.npz``: JAX's own outputs of the same program on the CPU (``o0``, ``o1``, ...), the third
  oracle of ``fusegen run --expected``.

Needs the ``models`` extra (``pip install -e '.[models]'``); the committed files let the tests run without it.
Usage: ``python scripts/gen_real_models.py [--out tests/data/real_models] [NAME ...]``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("JAX_PLATFORMS", "cpu")  # run on the CPU; the CUDA plugin still compiles for the topology

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT.parent / "shared" / "tools" / "jax_gpu_hlo" / "h200_min.txtpb"


def _gpu_device():
    import jax
    from jax.experimental import topologies

    spec = SPEC.read_text()
    return topologies.get_topology_desc(platform="cuda", topology="1x1x1", target_config=spec).devices[0]


def _keras_program(model, inputs: dict):
    """``(f, args)``: a pure function of (trainable, non-trainable, inputs) and its real arguments."""
    tv = [v.value for v in model.trainable_variables]
    ntv = [v.value for v in model.non_trainable_variables]

    def f(tv, ntv, x):
        out, _ = model.stateless_call(tv, ntv, x, training=False)
        return out

    return f, (tv, ntv, inputs)


def _tokens(rng, batch, seq, vocab):
    import jax.numpy as jnp

    ids = jnp.asarray(rng.integers(0, vocab, (batch, seq)), jnp.int32)
    mask = jnp.asarray(np.arange(seq)[None, :] < np.array([[seq], [seq - 3]])[:batch], jnp.int32)
    return ids, mask


def gpt2():
    import keras_hub

    m = keras_hub.models.GPT2Backbone(vocabulary_size=64, num_layers=2, num_heads=2, hidden_dim=32,
                                      intermediate_dim=64, max_sequence_length=16)
    ids, mask = _tokens(np.random.default_rng(0), 2, 8, 64)
    return _keras_program(m, {"token_ids": ids, "padding_mask": mask})


def bert():
    import jax.numpy as jnp
    import keras_hub

    m = keras_hub.models.BertBackbone(vocabulary_size=64, num_layers=2, num_heads=2, hidden_dim=32,
                                      intermediate_dim=64, max_sequence_length=16)
    ids, mask = _tokens(np.random.default_rng(1), 2, 8, 64)
    return _keras_program(m, {"token_ids": ids, "segment_ids": jnp.zeros_like(ids), "padding_mask": mask})


def llama_bf16():
    import keras_hub

    m = keras_hub.models.LlamaBackbone(vocabulary_size=64, num_layers=2, num_query_heads=4, num_key_value_heads=2,
                                       hidden_dim=32, intermediate_dim=64, dtype="bfloat16")
    ids, mask = _tokens(np.random.default_rng(2), 2, 8, 64)
    return _keras_program(m, {"token_ids": ids, "padding_mask": mask})


def gemma():
    import keras_hub

    m = keras_hub.models.GemmaBackbone(vocabulary_size=64, num_layers=2, num_query_heads=2, num_key_value_heads=1,
                                       hidden_dim=32, intermediate_dim=64, head_dim=16)
    ids, mask = _tokens(np.random.default_rng(3), 2, 8, 64)
    return _keras_program(m, {"token_ids": ids, "padding_mask": mask})


def mistral():
    import keras_hub

    m = keras_hub.models.MistralBackbone(vocabulary_size=64, num_layers=2, num_query_heads=4, num_key_value_heads=2,
                                         hidden_dim=32, intermediate_dim=64, sliding_window=4)
    ids, mask = _tokens(np.random.default_rng(4), 2, 8, 64)
    return _keras_program(m, {"token_ids": ids, "padding_mask": mask})


def mixtral(seed: int = 10):
    """A keras-hub Mixtral (sparse MoE, bf16): each token's router picks its top-2 of 4 experts."""
    import keras
    import keras_hub

    keras.utils.set_random_seed(seed)
    m = keras_hub.models.MixtralBackbone(vocabulary_size=64, num_layers=2, num_query_heads=4, num_key_value_heads=2,
                                         hidden_dim=32, intermediate_dim=64, num_experts=4, top_k=2,
                                         sliding_window=4, dtype="bfloat16")
    ids, mask = _tokens(np.random.default_rng(seed), 2, 8, 64)
    return _keras_program(m, {"token_ids": ids, "padding_mask": mask})


def vit():
    import jax.numpy as jnp
    import keras_hub

    m = keras_hub.models.ViTBackbone(image_shape=(32, 32, 3), patch_size=8, num_layers=2, num_heads=2,
                                     hidden_dim=32, mlp_dim=64)
    x = jnp.asarray(np.random.default_rng(5).standard_normal((2, 32, 32, 3)), jnp.float32)
    return _keras_program(m, x)


def resnet():
    import jax.numpy as jnp
    import keras_hub

    m = keras_hub.models.ResNetBackbone(input_conv_filters=[64], input_conv_kernel_sizes=[3],
                                        stackwise_num_filters=[64, 32], stackwise_num_blocks=[1, 1],
                                        stackwise_num_strides=[1, 2], block_type="basic_block",
                                        image_shape=(16, 16, 3))
    x = jnp.asarray(np.random.default_rng(6).standard_normal((2, 16, 16, 3)), jnp.float32)
    return _keras_program(m, x)


def adamw_step():
    """One optax AdamW training step of a small MLP classifier (loss, new params, new optimizer state)."""
    import jax
    import jax.numpy as jnp
    import optax

    rng = np.random.default_rng(7)
    params = {"w1": jnp.asarray(rng.standard_normal((16, 32)) * 0.25, jnp.float32), "b1": jnp.zeros(32, jnp.float32),
              "w2": jnp.asarray(rng.standard_normal((32, 8)) * 0.18, jnp.float32), "b2": jnp.zeros(8, jnp.float32)}
    opt = optax.adamw(1e-3, weight_decay=1e-2)
    state = opt.init(params)
    x = jnp.asarray(rng.standard_normal((64, 16)), jnp.float32)
    y = jnp.asarray(rng.integers(0, 8, 64), jnp.int32)

    def step(params, state, x, y):
        def loss_fn(p):
            h = jax.nn.gelu(x @ p["w1"] + p["b1"])
            logits = h @ p["w2"] + p["b2"]
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, state = opt.update(grads, state, params)
        return loss, optax.apply_updates(params, updates), state

    return step, (params, state, x, y)


def flax_block():
    """A pre-LayerNorm transformer block of flax.linen layers."""
    import jax
    import jax.numpy as jnp
    import flax.linen as nn

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = nn.LayerNorm()(x)
            x = x + nn.MultiHeadDotProductAttention(num_heads=2, qkv_features=32)(h, h)
            h = nn.LayerNorm()(x)
            return x + nn.Dense(32)(nn.gelu(nn.Dense(64)(h)))

    x = jnp.asarray(np.random.default_rng(8).standard_normal((2, 8, 32)), jnp.float32)
    block = Block()
    variables = block.init(jax.random.PRNGKey(0), x)
    return (lambda v, x: block.apply(v, x)), (variables, x)


def equinox_gru_scan():
    """An equinox GRU cell run over 24 steps with ``lax.scan`` (a recurrence with saturating tanh)."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    cell = eqx.nn.GRUCell(8, 16, key=jax.random.PRNGKey(1))
    params, static = eqx.partition(cell, eqx.is_array)
    xs = jnp.asarray(np.random.default_rng(9).standard_normal((24, 8)) * 2.0, jnp.float32)

    def run(params, xs):
        c = eqx.combine(params, static)

        def body(h, x):
            h = c(x, h)
            return h, h

        h, hs = jax.lax.scan(body, jnp.zeros(16, jnp.float32), xs)
        return h, hs

    return run, (params, xs)


def equinox_mlp():
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    mlp = eqx.nn.MLP(16, 8, 64, 3, activation=jax.nn.silu, key=jax.random.PRNGKey(2))
    params, static = eqx.partition(mlp, eqx.is_array)
    x = jnp.asarray(np.random.default_rng(10).standard_normal((32, 16)), jnp.float32)
    return (lambda p, x: jax.vmap(eqx.combine(p, static))(x)), (params, x)


def _logit_offset_first_step(opt, seed: int, batch: int):
    """One optimizer step of ``opt`` (an optax transformation) on a classifier with a softmax-invariant logit
    offset: ``logits = x @ w + offset`` with ``w`` f32[32,16] (standard normal x 0.3), ``offset`` f32[1] of
    zeros, ``x`` f32[batch,32] and labels ``y`` s32[batch] in [0, 16), all drawn in that order from
    ``np.random.default_rng(seed)``. Returns ``(step, (params, state, x, y))``, ``state`` the optimizer's
    initial state."""
    import jax
    import jax.numpy as jnp
    import optax

    rng = np.random.default_rng(seed)
    params = {"w": jnp.asarray(rng.standard_normal((32, 16)) * 0.3, jnp.float32), "offset": jnp.zeros(1, jnp.float32)}
    state = opt.init(params)
    x = jnp.asarray(rng.standard_normal((batch, 32)), jnp.float32)
    y = jnp.asarray(rng.integers(0, 16, batch), jnp.int32)

    def step(params, state, x, y):
        def loss_fn(p):
            logits = x @ p["w"] + p["offset"]
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

        grads = jax.grad(loss_fn)(params)
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates)

    return step, (params, state, x, y)


def adamw_logit_offset():
    """AdamW's first step on a classifier with a softmax-invariant logit offset: its exact gradient is 0, the
    f32 one is rounding noise, and AdamW turns any nonzero noise into an update of about +-lr."""
    import optax

    return _logit_offset_first_step(optax.adamw(1e-2, weight_decay=0.0), seed=11, batch=128)


def adafactor_logit_offset(seed: int = 29):
    """Adafactor's first step on a classifier with a softmax-invariant logit offset (issue 29 item 2): the
    offset's exact gradient is 0, its f32 value a 64-term sum that cancels below its own rounding, and
    adafactor's ``v = g^2 + 1e-30; u = g / sqrt(v)`` turns that noise into an update of about +-lr."""
    import optax

    return _logit_offset_first_step(optax.adafactor(1e-2), seed=seed, batch=64)


def equinox_rnn_chaotic():
    """An Elman RNN of equinox Linear layers, ``h = tanh(W h + U x)``, with gain 3 (chaotic) over 48 steps."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    k1, k2 = jax.random.split(jax.random.PRNGKey(3))
    w = eqx.nn.Linear(32, 32, use_bias=False, key=k1)
    w = eqx.tree_at(lambda m: m.weight, w, w.weight * 3.0 * np.sqrt(3.0))  # uniform(+-1/sqrt(n)) -> gain 3
    u = eqx.nn.Linear(8, 32, key=k2)
    params, static = eqx.partition((w, u), eqx.is_array)
    xs = jnp.asarray(np.random.default_rng(12).standard_normal((48, 8)), jnp.float32)

    def run(params, xs):
        w, u = eqx.combine(params, static)

        def body(h, x):
            h = jnp.tanh(w(h) + u(x))
            return h, h

        return jax.lax.scan(body, jnp.full(32, 0.1, jnp.float32), xs)[0]

    return run, (params, xs)


def flax_batchnorm_offset():
    """flax BatchNorm in training mode on activations with a large common offset: its fast variance
    ``E[x^2] - E[x]^2`` cancels catastrophically in f32."""
    import jax
    import jax.numpy as jnp
    import flax.linen as nn

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = nn.Dense(16)(x)
            return nn.BatchNorm(use_running_average=False)(h)

    rng = np.random.default_rng(13)
    x = jnp.asarray(rng.standard_normal((256, 8)) + 3000.0, jnp.float32)
    net = Net()
    variables = net.init(jax.random.PRNGKey(0), x)

    def f(v, x):
        y, _ = net.apply(v, x, mutable=["batch_stats"])
        return y

    return f, (variables, x)


def flax_odd_mlp():
    """flax Dense / LayerNorm / relu layers at sizes that do not fill a tile (100 and 37 features), and a
    ``jnp.clip``: masked lanes and clamps in the generated kernels matter here."""
    import jax
    import jax.numpy as jnp
    import flax.linen as nn

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = nn.relu(nn.LayerNorm()(nn.Dense(100)(x)))
            h = jnp.clip(nn.LayerNorm()(nn.Dense(37)(h)), -1.5, 1.5)
            return nn.Dense(10)(h).max(axis=-1), h.sum(axis=0)

    x = jnp.asarray(np.random.default_rng(14).standard_normal((50, 23)), jnp.float32)
    net = Net()
    variables = net.init(jax.random.PRNGKey(0), x)
    return (lambda v, x: net.apply(v, x)), (variables, x)


PROGRAMS = {f.__name__: f for f in (flax_odd_mlp, gpt2, bert, llama_bf16, gemma, mistral, mixtral, vit, resnet, adamw_step, flax_block,
                                    equinox_gru_scan, equinox_mlp, adamw_logit_offset, adafactor_logit_offset, equinox_rnn_chaotic,
                                    flax_batchnorm_offset)}


def generate(name: str, out_dir: Path, device) -> None:
    import jax
    from jax.sharding import SingleDeviceSharding

    f, args = PROGRAMS[name]()
    flat, _ = jax.tree_util.tree_flatten(args)
    sds = jax.tree_util.tree_map(
        lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=SingleDeviceSharding(device)), args)
    hlo = jax.jit(f, keep_unused=True).lower(*sds).compile().as_text()
    expected = jax.tree_util.tree_leaves(jax.jit(f, keep_unused=True)(*args))
    (out_dir / f"{name}.h200_opt.hlo").write_text(hlo)
    np.savez_compressed(out_dir / f"{name}.inputs.npz", **{f"p{i}": np.asarray(a) for i, a in enumerate(flat)})
    # (np.savez keeps bfloat16 as raw 2-byte records; fusegen views them back as bf16)
    np.savez_compressed(out_dir / f"{name}.expected.npz", **{f"o{i}": np.asarray(a) for i, a in enumerate(expected)})
    print(f"{name}: {len(hlo) // 1024} KB HLO, {hlo.count(' fusion(')} fusions, {len(flat)} parameters, "
          f"{len(expected)} outputs")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help=f"programs (default all): {', '.join(PROGRAMS)}")
    ap.add_argument("--out", default=str(ROOT / "tests" / "data" / "real_models"))
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    device = _gpu_device()
    failed = 0
    for name in a.names or PROGRAMS:
        try:
            generate(name, out, device)
        except Exception as e:  # one library's API drift must not stop the others
            failed += 1
            print(f"{name}: FAILED {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
