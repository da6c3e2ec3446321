"""The live dashboard: `GET /dashboard` (a page of plain HTML, CSS and JS, nothing loaded from
elsewhere) polling `GET /dashboard/data` (admin only); the recorder of recent history it
charts. Every figure on it is also a Prometheus series (server/metrics.py)."""

from radixrt.serve.http.dashboard.api import add_dashboard_routes
from radixrt.serve.http.dashboard.recorder import DashboardRecorder

__all__ = ["DashboardRecorder", "add_dashboard_routes"]
