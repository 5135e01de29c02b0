"""``turbogate jobs lint FILE``: check an L4 job file offline with the gateway's own checks
(sched/jobgraph.py), and print its depth, fan-out, topological order and every problem."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
import yaml

from turbogate.clierrors import OneLineErrors
from turbogate.config import load_config
from turbogate.configpolicy import job_limits
from turbogate.errors import BadInput, ConfigError
from turbogate.sched.jobgraph import JobLimits, Problem, check_job

app = typer.Typer(help="Job graphs (DAGs of chat requests, POST /v1/jobs): check them offline.",
                  no_args_is_help=True, cls=OneLineErrors)
_DEFAULTS = JobLimits()


def _load(path: Path) -> Any:
    try:
        text = path.read_text()
    except OSError as exc:
        raise typer.BadParameter(f"cannot read {path} ({exc.strerror})", param_hint="FILE") from None
    try:
        return json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise typer.BadParameter(f"{path} is not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {exc}",
                                 param_hint="FILE") from None


@app.command("lint")
def lint(
    path: Path = typer.Argument(..., help="A job file, YAML or JSON: the body you would POST to /v1/jobs."),
    config: Path | None = typer.Option(
        None, "--config", "-c", help="Gateway YAML: take its jobs limits, and check each step's model is served."),
    max_depth: int | None = typer.Option(
        None, "--max-depth", min=0, help="Longest chain of dependencies, in edges "
        f"(default {_DEFAULTS.max_depth}, or the config's jobs.max_depth)."),
    max_fan_out: int | None = typer.Option(
        None, "--max-fan-out", min=1, help="Most steps depending directly on one step "
        f"(default {_DEFAULTS.max_fan_out}, or the config's jobs.max_fan_out)."),
    max_steps: int | None = typer.Option(
        None, "--max-steps", min=1, help=f"Most steps in a job (default {_DEFAULTS.max_steps}, or the config's "
        "jobs.max_steps)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of text."),
) -> None:
    """Check a job file: acyclic, within the depth and fan-out limits, every reference known.

    Exits 0 when the job would be accepted, 1 when it has problems (each named), 2 when the
    file or the config cannot be read.
    """
    limits = _DEFAULTS
    models: set[str] | None = None
    if config is not None:
        try:
            cfg = load_config(config)
        except ConfigError as exc:
            raise BadInput(f"bad config: {exc}", f"fix the field it names in {config}") from None
        limits = job_limits(cfg.jobs)
        models = {m for p in cfg.pools for m in p.models}
    limits = JobLimits(limits.max_depth if max_depth is None else max_depth,
                       limits.max_fan_out if max_fan_out is None else max_fan_out,
                       limits.max_steps if max_steps is None else max_steps)
    graph = check_job(_load(path), limits)
    problems = list(graph.problems)
    if models is not None:
        problems += [Problem("unknown_model", s.id, f"steps[{i}].request.model",
                             f"the model {s.request.get('model')!r} is not served by {config}")
                     for i, s in enumerate(graph.steps) if isinstance(s.request.get("model"), str)
                     and s.request["model"] not in models]
    if as_json:
        typer.echo(json.dumps({
            "file": str(path), "ok": not problems, "steps": len(graph.steps), "depth": graph.depth,
            "fan_out": graph.fan_out, "order": list(graph.order),
            "limits": {"max_depth": limits.max_depth, "max_fan_out": limits.max_fan_out,
                       "max_steps": limits.max_steps},
            "problems": [{"kind": p.kind, "step": p.step, "field": p.field, "message": p.message} for p in problems]},
            indent=2))
    else:
        depth = "undefined (a cycle)" if graph.depth is None else str(graph.depth)
        typer.echo(f"{path}: {len(graph.steps)} steps, depth {depth} (limit {limits.max_depth}), "
                   f"fan-out {graph.fan_out} (limit {limits.max_fan_out})")
        placed = " → ".join(graph.order) or "(none)"
        unplaced = len(graph.steps) - len(graph.order)
        typer.echo(f"order: {placed}" + (f"  ({unplaced} steps cannot be ordered: a cycle)" if unplaced else ""))
        if problems:
            typer.echo(f"{len(problems)} problem{'s' if len(problems) != 1 else ''}:")
            for p in problems:
                typer.echo(f"  [{p.kind}] {p}")
        else:
            typer.echo("ok: the gateway would accept this job")
    if problems:
        raise typer.Exit(1)
