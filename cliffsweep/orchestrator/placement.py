"""Placement groups, read and cleaned from the driver: what a waiting Train job asks for (the
evaluator pool gives way to it), and the groups whose creator died (else held for good)."""

from __future__ import annotations

REAP_EVERY_S = 5.0


def reap_orphaned_placement_groups() -> int:
    """Remove the placement groups whose creator actor died: a Train job's worker group, when its
    controller died with its node. Such a group outlives it (a placement group lives as long as
    the sweep's driver), and Ray Train's own cleaner, an actor beside the controller, can die
    with the same node: the rehearsal's node kills left four 2-GPU groups held for good, and the
    retried jobs waited forever for those GPUs. Reads the GCS's placement group table (Ray's
    private accessor: `placement_group_table()` omits the creator); returns how many it removed."""
    import ray

    try:
        from ray.core.generated import gcs_pb2
        from ray.util.placement_group import PlacementGroup

        table = ray._private.state.state._connect_and_get_accessor().get_placement_group_table()
    except (ImportError, AttributeError):  # another Ray: nothing to reap here
        return 0
    nil = b"\xff" * 16
    removed = 0
    for raw in table:
        pg = gcs_pb2.PlacementGroupTableData.FromString(raw)
        by_actor = pg.creator_actor_id and pg.creator_actor_id != nil
        if pg.state != gcs_pb2.PlacementGroupTableData.REMOVED and by_actor and pg.creator_actor_dead:
            ray.util.remove_placement_group(PlacementGroup(ray.PlacementGroupID(pg.placement_group_id)))
            removed += 1
    return removed


def demand(pg: dict) -> dict[str, float]:
    """The resources a placement group (ray.util.placement_group_table's entry) asks for in all."""
    out: dict[str, float] = {}
    for bundle in pg["bundles"].values():
        for k, v in bundle.items():
            out[k] = out.get(k, 0.0) + v
    return out


def a_job_waits_for(free: dict[str, float], held: dict[str, float]) -> bool:
    """Whether a Train job waiting for resources would fit in what is `free` plus what idle
    evaluators hold (`held`). A Train job that waits is a pending placement group (its worker
    group's, or Tune's for its trial): Ray places it as soon as its resources are free, so free
    resources are those no job could take."""
    import ray

    waiting = [demand(pg) for pg in ray.util.placement_group_table().values() if pg["state"] == "PENDING"]
    return any(all(free.get(k, 0.0) + held.get(k, 0.0) >= v for k, v in d.items()) for d in waiting)
