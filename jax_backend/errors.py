"""The base class of the errors jax_backend raises for the user to read: a checkpoint or PLY that
cannot be read, a write that ran out of space, training that diverged. Their messages name the
file, array or step; a front end (the nerfstudio plugin) prints them as one line. Imports nothing."""


class UserFacingError(Exception):
    """An error whose message is meant for the user as it is (it names the file, value or step)."""
