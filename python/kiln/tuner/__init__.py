"""The auto-scheduler (session.py)."""
from .session import (Task, TuneResult, make_task, tune, plot_curve, measure, default_decisions, candidate_trace,
                      best_schedule, migrate_features, ranking_report, _best)
