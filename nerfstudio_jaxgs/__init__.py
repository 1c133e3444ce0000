"""jax-gs nerfstudio plugin: adapts nerfstudio's data, viewer and exporter to the JAX backend."""
