"""``photomosaics queues``: queue depths and poison counts; ``requeue`` and ``purge`` of poison.

``--poison`` also lists what lies in each poison queue (message id, when, dequeue count,
reason), so an operator can see at once why messages failed. Peeking changes nothing.

``queues requeue QUEUE (--id ID | --all)`` puts poison messages back on their work queue as
fresh messages (dequeue count 0) with a note in the job's event log; ``queues purge QUEUE
(--id ID | --all)`` deletes them. The CLI talks to storage with the account's connection
string, which already grants everything: it needs no operator token (the web API does).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from photomosaics.storage import DATA_DIR_OPTION, command_stores, run_hints

if TYPE_CHECKING:  # the storage SDK loads when a command runs, not with the CLI
    from dal.queues.work_queue import ImageProcessingQueue
    from dal.stores import Stores


@click.group(invoke_without_command=True)
@click.option("--poison", "show_poison", is_flag=True, help="Also list the poison messages with their reasons.")
@DATA_DIR_OPTION
@click.pass_context
def queues(ctx: click.Context, show_poison: bool, data_dir: str | None) -> None:
    """Show queue depths (approximate, as Azure reports them) and poison counts."""
    ctx.ensure_object(dict)
    ctx.obj["data_dir"] = data_dir
    if ctx.invoked_subcommand is not None:
        return
    from dal.operations.poison import list_poison

    with command_stores(data_dir) as stores:
        rows = []
        for queue in stores.queues.monitored():
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
            for listing in list_poison(queue):
                entry = listing.entry
                when = entry.moved_at.strftime("%Y-%m-%d %H:%M:%S")
                click.echo(f"  {listing.id}  {when}  dequeue count {entry.dequeue_count}: {entry.reason}")


def _which(message_id: str | None, all_: bool) -> str | None:
    if (message_id is None) == (not all_):
        raise click.UsageError("give exactly one of --id ID or --all")
    return message_id


def _queue(stores: Stores, name: str) -> ImageProcessingQueue:
    try:
        return stores.queues.by_name(name)
    except KeyError:
        names = ", ".join(q.short_name for q in stores.queues.monitored())
        raise click.BadParameter(f"no work queue named {name!r} (one of: {names})", param_hint="QUEUE") from None


_ID = click.option("--id", "message_id", default=None, help="The poison message id (see `queues --poison`).")
_ALL = click.option("--all", "all_", is_flag=True, help="Every message of the poison queue.")


@queues.command()
@click.argument("queue_name", metavar="QUEUE")
@_ID
@_ALL
@click.pass_context
def requeue(ctx: click.Context, queue_name: str, message_id: str | None, all_: bool) -> None:
    """Put poison messages of QUEUE back on QUEUE, with a fresh dequeue count."""
    from dal.operations.poison import requeue as do_requeue

    wanted = _which(message_id, all_)
    with command_stores(ctx.obj["data_dir"]) as stores:
        queue = _queue(stores, queue_name)
        queue.hints = run_hints(ctx.obj["data_dir"]) or queue.hints  # a running `make run` takes them at once
        result = do_requeue(queue, stores.jobs, message_id=wanted, actor="photomosaics queues requeue")
    for skipped, why in result.skipped.items():
        click.echo(f"left in poison: {skipped}: {why}", err=True)
    if result.missing:
        raise click.ClickException(f"no poison message {result.missing[0]!r} in {queue.poison.name}")
    click.echo(f"requeued {len(result.done)} message(s) to {queue.name}")


@queues.command()
@click.argument("queue_name", metavar="QUEUE")
@_ID
@_ALL
@click.pass_context
def purge(ctx: click.Context, queue_name: str, message_id: str | None, all_: bool) -> None:
    """Delete poison messages of QUEUE for good."""
    from dal.operations.poison import purge as do_purge

    wanted = _which(message_id, all_)
    with command_stores(ctx.obj["data_dir"]) as stores:
        queue = _queue(stores, queue_name)
        result = do_purge(queue, message_id=wanted)
    if result.missing:
        raise click.ClickException(f"no poison message {result.missing[0]!r} in {queue.poison.name}")
    click.echo(f"purged {result.count} message(s) from {queue.poison.name}")
