"""Hypothesis profiles (chosen by ATTNREF_PROFILE) and shared pytest settings."""
import os

from hypothesis import HealthCheck, Phase, Verbosity, settings

_common = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("dev", max_examples=25, **_common)
settings.register_profile("ci", max_examples=25, derandomize=True, database=None, print_blob=True, **_common)
settings.register_profile("nightly", max_examples=2_000, **_common)
settings.register_profile("campaign", max_examples=10_000, **_common)
settings.register_profile("repro", phases=[Phase.explicit, Phase.reuse], verbosity=Verbosity.verbose, **_common)
settings.load_profile(os.environ.get("ATTNREF_PROFILE", "dev"))

# Hypothesis mixes constants from every imported local module into its draws: without this, which
# modules earlier tests imported would change what a derandomized test draws.
from campaign.drawing import pin_hypothesis_constants  # noqa: E402

pin_hypothesis_constants()
