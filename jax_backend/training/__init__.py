"""Training: Gaussians with a static capacity, the loss, optimizer groups, density-control
strategies, the on-device dataset and view plan, the compiled step and block, the host `Trainer`
(the engine) and its other jobs each in a module (`aot`: compiling for other devices,
`state_arrays`: the state as named arrays and in checkpoint files; `evaluation`), snapshots, and several hosts (`distributed`).

Layers, bottom up: gaussians, loss, schedule -> optim, state -> strategy -> data, step ->
trainer -> aot, state_arrays, evaluation, snapshots."""
