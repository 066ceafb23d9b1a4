"""Compress one teacher with its neurons sharded over the devices of several processes (hosts).

Start the same command on every host (one process per host), changing only ``--process-id``::

    python benchmarks/multihost_compress.py --coordinator HOST0:12345 --num-processes 2 \\
        --process-id 0 --out result.npz        # on host 0
    python benchmarks/multihost_compress.py --coordinator HOST0:12345 --num-processes 2 \\
        --process-id 1                         # on host 1

Each process calls :func:`jax.distributed.initialize`, builds the global mesh of every process's
devices, places the teacher with :func:`jaxcompress.shard` (every process holds the same host
copy here and keeps only its own devices' shards; with a teacher too large for one host, build
the global arrays from per-host shards with :func:`jax.make_array_from_callback` instead) and
runs the same :func:`jaxcompress.compress` call: one SPMD program, the collectives of the
sharded selection and of the re-weighting crossing hosts. Process 0 writes the compressed
network (replicated on every device, so any process can read it) to ``--out``.

On one machine, ``--local-devices N`` gives each process ``N`` CPU devices
(``--xla_force_host_platform_device_count``): ``tests/test_sharding.py`` starts two processes
with two devices each on ``localhost`` and checks the result against one process with four.
"""

from __future__ import annotations

import argparse
import os
import sys


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--coordinator", required=True, help="HOST:PORT of process 0")
    p.add_argument("--num-processes", type=int, required=True)
    p.add_argument("--process-id", type=int, required=True)
    p.add_argument("--local-devices", type=int, default=None,
                   help="CPU devices per process (forced host devices; default: the real ones)")
    p.add_argument("--sizes", default="2,64,64,1", help="teacher layer sizes, comma separated")
    p.add_argument("--order", type=int, default=4, help="Taylor order k")
    p.add_argument("--method", choices=("derivative", "collocation"), default="derivative")
    p.add_argument("--seed", type=int, default=0, help="teacher PRNG seed")
    p.add_argument("--out", default=None, help="where process 0 writes the result (.npz)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse(argv)
    if args.local_devices:
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_"
                                   f"platform_device_count={args.local_devices}").strip()
    import jax

    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=args.coordinator,
                               num_processes=args.num_processes, process_id=args.process_id)
    import numpy as np
    from jax.sharding import Mesh

    import jaxcompress as jc

    sizes = [int(s) for s in args.sizes.split(",")]
    mesh = Mesh(np.array(jax.devices()), (jc.sharding.NEURONS,))
    teacher = jc.init_mlp(jax.random.PRNGKey(args.seed), sizes)  # the same on every process
    sharded = jc.shard(teacher, mesh)
    method = (jc.derivative_matching(args.order) if args.method == "derivative"
              else jc.collocation(args.order))
    small, info = jc.compress(sharded, method, activation="sigmoid",
                              domain=jc.Ball(sizes[0], 1.0))
    local = [{k: np.asarray(v.addressable_data(0)) for k, v in layer.items()} for layer in small]
    print(f"process {jax.process_index()} of {jax.process_count()}: {jax.device_count()} devices "
          f"({jax.local_device_count()} local), compressed to {jc.layer_sizes(local)}, error "
          f"estimate {float(np.asarray(info.error_estimate.addressable_data(0))):.3e}",
          flush=True)
    if args.out and jax.process_index() == 0:
        flat = {f"{name}_{i}": a for i, layer in enumerate(local) for name, a in layer.items()}
        kept = {f"kept_{i}": np.asarray(li.kept.addressable_data(0))
                for i, li in enumerate(info.layers)}
        np.savez(args.out, **flat, **kept)
    jax.distributed.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
