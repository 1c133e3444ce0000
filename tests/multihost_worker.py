"""One process of the multi-host test: train a few blocks on this host's share of the views."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def train_local(replicas=1, views=None, tile_devices=1):
    """Train 3 blocks of 10 steps on `views` (default: all; "host": this host's share) of the
    synthetic scene, each replica's Gaussians split over `tile_devices`; returns the
    parameters and the global view index of every lane at every step."""
    import jax
    import numpy as np

    from jax_backend import DefaultStrategy, OptimConfig, TrainConfig, Trainer, init_random, make_layout
    from synthetic import known_scene

    _, train, _ = known_scene(views=16)
    if views == "host":
        from jax_backend import host_views

        views = host_views(train.num_views)
    mine = np.arange(train.num_views) if views is None else views
    data = jax.tree_util.tree_map(lambda x: x[mine], train)
    strategy = DefaultStrategy(refine_start=0, refine_every=10, reset_every=20, grow_grad2d=0.0005)
    cfg = TrainConfig(max_steps=200, steps_per_block=10, sh_degree=1, sh_degree_interval=10, strategy=strategy,
                      optim=OptimConfig().with_eps(1e-6))
    tr = Trainer(cfg, data, init_random(256, -1, 1, sh_degree=1, capacity=1024), scene_extent=1.5,
                 layout=make_layout(replicas=replicas, tile_devices=tile_devices), log=lambda m: None)
    views = []
    for _ in range(3):
        m, _ = tr.run_block()
        views.append(m["view"])
    g = tr.state.gaussians
    return dict(alive=np.asarray(g.alive), views=mine[np.concatenate(views)],
                **{k: np.asarray(v) for k, v in g.params.items()})


def main(out_path, tile_devices=1):
    from jax_backend import initialize_from_env

    initialize_from_env()
    import jax
    import numpy as np

    out = train_local(replicas=len(jax.local_devices()) // tile_devices, views="host", tile_devices=tile_devices)
    np.savez(out_path, process=jax.process_index(), count=jax.process_count(), global_views=out.pop("views"), **out)


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:]))
