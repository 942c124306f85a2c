"""What the runner tells the outside while the grid runs: the `GridObserver` hooks.

The runner (`loadgen.runner.run_grid_async`) calls, for every run (one repetition of one grid
point), `before_run` right before its warm-up and `after_run` right after its last request,
then, once when it builds the `GridResult`, `incidents` and `warnings`. Observers watch the
serving side from outside the requests: the frontend's /metrics (`loadgen.server_metrics`), a
Kubernetes pod watch (`kubeclient.pod_watch`), the processes of a local graph
(`simulator.localgraph`). Starting and stopping what they watch is their owner's business (they
are context managers); the runner only calls these hooks.
"""

from measurement.incidents import Incident
from measurement.results import RunSummary


class GridObserver:
    """Base class: every hook does nothing. Subclasses override what they need."""

    async def before_run(self, prefix_kinds: int, concurrency: int, repetition: int) -> None:
        """Called right before the run's warm-up starts."""

    async def after_run(self, run: RunSummary) -> RunSummary:
        """Called right after the run's last request; returns the run's summary, possibly with
        more fields set (e.g. `RunSummary.server`)."""
        return run

    def incidents(self) -> list[Incident]:
        """What the serving side did so far (unplaced: the runner sets `t_s` and the run)."""
        return []

    def warnings(self) -> list[str]:
        """One-line warnings for `GridResult.warnings` (e.g. "no /metrics at ...")."""
        return []
