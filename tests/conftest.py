import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# four CPU devices for the data-parallel tests (computations elsewhere stay on the first one)
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4").strip()
sys.path.insert(0, os.path.dirname(__file__))
