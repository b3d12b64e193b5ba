"""``photomosaics queues``: the depth of the four work queues and their poison queues.

``--poison`` also lists what lies in each poison queue, with the reason it was moved aside,
so an operator can see at once why messages failed. Peeking changes nothing.
"""

from __future__ import annotations

import click

from photomosaics.cli import main
from photomosaics.storage import DATA_DIR_OPTION, command_stores


@main.command()
@click.option("--poison", "show_poison", is_flag=True, help="Also list the poison messages with their reasons.")
@DATA_DIR_OPTION
def queues(show_poison: bool, data_dir: str | None) -> None:
    """Show queue depths (approximate, as Azure reports them) and poison counts."""
    with command_stores(data_dir) as stores:
        rows = []
        for queue in stores.queues.all():
            queue.ensure_exists()
            rows.append((queue, queue.approximate_depth(), queue.poison.approximate_depth()))
        width = max(len(queue.name) for queue, _, _ in rows)
        click.echo(f"{'queue':<{width}}  {'depth':>7}  {'poison':>7}")
        for queue, depth, poisoned in rows:
            click.echo(f"{queue.name:<{width}}  {depth:>7}  {poisoned:>7}")
        if not show_poison:
            return
        for queue, _, poisoned in rows:
            if not poisoned:
                continue
            click.echo(f"\n{queue.poison.name}:")
            for entry in queue.poison.peek():
                when = entry.moved_at.strftime("%Y-%m-%d %H:%M:%S")
                click.echo(f"  {when}  dequeue count {entry.dequeue_count}: {entry.reason}")
