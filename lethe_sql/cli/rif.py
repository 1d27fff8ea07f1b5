"""``lethe rif reset|status``: what retrieval-induced forgetting has learned."""

from __future__ import annotations

import typer

from .common import JsonOut, errors, open_store, print_json

rif_app = typer.Typer(help="Retrieval-induced forgetting: what the store has learned.", no_args_is_help=True)


@rif_app.command("reset")
def rif_reset(json_out: JsonOut = False) -> None:
    """Forget everything learned: suppression, query clusters, query log, tiers and affinity."""
    with errors():
        from ..learn import reset

        with open_store(create=False) as store:
            counts = reset(store.con)
        if json_out:
            print_json({"cleared": counts})
        else:
            typer.echo(f"cleared {counts['suppression']} suppression rows, {counts['centroids']} clusters, "
                       f"{counts['queries']} logged queries; tiers and affinity reset")


@rif_app.command("status")
def rif_status(json_out: JsonOut = False) -> None:
    """Show the learned state: search step, clusters, suppression, tiers."""
    with errors():
        with open_store(create=False) as store:  # a writer: what searches deferred is applied first
            con = store.con
            info = {
                "search_step": int(con.execute("SELECT value FROM meta WHERE key='search_step'").fetchone()[0]),
                "logged_queries": con.execute("SELECT count(*) FROM query_log").fetchone()[0],
                "clusters": con.execute("SELECT count(*) FROM rif_centroids").fetchone()[0],
                "suppressed_pairs": con.execute("SELECT count(*) FROM rif_suppression").fetchone()[0],
                "tiers": dict(con.execute("SELECT tier, entries FROM lethe_lifecycle ORDER BY tier").fetchall()),
                "n_clusters_setting": store.settings.n_clusters,
            }
        if json_out:
            print_json(info)
            return
        for k, v in info.items():
            typer.echo(f"{k + ':':<20}{v}")
