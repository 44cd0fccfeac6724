#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: dbinstance_repave
short_description: Report DBInstance drift from the baked image catalog and repave a fleet safely
version_added: 0.1.0
description:
  - Compares every DBInstance in scope with the baked image catalog (the tip of its OS stream, the PostgreSQL
    majors each revision carries, end-of-life dates) and, with O(state=repaved), brings them to the tip.
  - "Verdicts: V(Current); V(OSUpdateAvailable) (action C(os-repave): the tip carries the instance's
    engineVersion, so replacing the OS disk keeps pgdata and the major); V(PGVersionEOL) (action
    C(pg-major-migration): the tip does not carry the major or it is past end of life, so a repave would make
    the data unreadable and is never offered: pg_dump and restore into a supported major); V(InvalidOSStream)
    (the stream is not in the catalog or not validated); V(UnsupportedEngineVersion) (action C(recreate): the
    operator refused to create it, status reason C(UnsupportedEngineVersion), and it never ran a revision, so
    there is no data to pg_dump: delete it and create it with a supported engineVersion; a roll-out skips
    it); V(EngineVersionUnknown) (no action: the running instance's major was never recorded, in
    C(spec.engineVersion) or, in direct mode, the VM's C(goldenimage.pipeline/engine-version) annotation; it
    is neither end of life nor repaved until that is set)."
  - Like RDS describe-pending-maintenance-actions, each entry carries its action, its opt-in status, with
    O(maintenance_policy) an auto-apply-after and a forced-apply date counted from the day the target was
    offered, the date the repave is applied as things stand (RV(instances[].current_apply)) and a description.
    An instance on an end-of-life major carries its migration deadline.
    The operator's own C(OSUpdateAvailable)/C(PGVersionEOL) conditions are shown, and any disagreement with
    this catalog is flagged.
  - O(state=report) lists the scope with one LIST and reads the catalog once, whatever the number of
    instances, and never changes anything.
  - O(state=repaved) with O(strategy=operator) refuses, before writing anything, every instance whose
    stream is not validated (C(InvalidOSStream)), whose target's recorded signature the catalog's trust
    policy does not accept (C(UntrustedImage), for no verified signature recorded where the policy requires
    one, a signing key the policy no longer trusts for the stream, an unsigned registration under a
    relaxation taken back, or a verified verdict whose evidence (the signature and provenance texts the
    registration recorded) does not verify again for the revision's artifact and the SHA-512 its checksum
    names, since a verdict written into the catalog by hand proves nothing), whose major was never recorded
    (C(EngineVersionUnknown)), whose target does not carry its major or whose major is past end of life
    (C(RepaveBlockedPGVersionEOL)), or that is not C(Available) (C(NotAvailable)); a refused instance gets no
    annotation. Then it sets the trigger annotation (O(trigger_annotation)=C(now))
    and waits until the operator reports phase C(Available), C(status.appliedSpec.imageRevision) equals the
    target and the annotation is cleared.
  - "Disruption only by intent: a repave starts only for an instance O(names) lists with O(opt_in=immediate),
    once its forced-apply date (O(maintenance_policy)) has come whatever the window, or inside its maintenance
    window with O(opt_in=next-maintenance) or once its auto-apply date has passed. An instance's window is its
    own annotation C(goldenimage.pipeline/maintenance-window) (for example C(sat,sun 22:00-04:00
    Europe/Berlin)), else O(window). With no window and no such choice nothing is repaved, and the result says
    why for each instance (RV(instances[].held)) and in RV(msg); what started each repave is recorded in
    RV(intent) and RV(instances[].applied_by)."
  - A primary and its standbys (a standby carries the label C(goldenimage.pipeline/standby-of=<primary>))
    are never repaved together, whatever O(max_unavailable) is; one member of such a group at a time.
  - A fleet is repaved in batches, never with more than O(max_unavailable) instances unavailable at once
    (instances already unavailable count), in O(order), each instance inside its window. Before each batch
    the scope is
    listed again and only as many instances start as the budget allows at that moment. An instance already
    repaving (an interrupted run) is waited on and never triggered again; instances already on the target
    are skipped, so a rerun continues where the last run stopped.
  - With O(strategy=direct) the module swaps the OS disk of a Harvester VM itself (stop, new OS disk named
    after the revision, start, wait for the guest agent, delete the old OS disk); pgdata is never touched.
    O(state=absent) tears such a VM down with every disk it declared.
  - "How the operator consumes the catalog this collection writes: it reads the catalog document (the
    ConfigMap or file O(catalog) names: C(images) with each revision's OS version, PostgreSQL majors and
    Harvester image, and C(streams) with each stream's tip and its C(validated) gate), and two env variables
    of its Deployment: C(BACKING_IMAGE_OS_VERSION), the stream of a new DBInstance that names none, and
    C(BACKING_IMAGE_REPLICAS), the replica count it asks for on each backing image
    (M(goldenimage.pipeline.dbinstance_operator_env) sets both). A new instance gets the tip of that stream
    if the stream is validated and the tip carries its engineVersion; a running one is compared with its
    stream's tip (C(OSUpdateAvailable) or C(PGVersionEOL)) and repaved to it when C(repave-trigger=now) is
    set.
    Publishing a revision (M(goldenimage.pipeline.baked_image), M(goldenimage.pipeline.baked_image_stream))
    changes what the operator reads next, with no redeploy; flipping the default stream is an env change and
    a rolling restart."
  - This module computes each target with the operator's rule (an instance's own C(spec.osVersion), else the
    operator's C(BACKING_IMAGE_OS_VERSION), else the catalog's C(default_stream)) when O(operator) names the
    operator's Deployment, so a repave aims where the operator provisions; RV(default_stream) says which was
    used.
author:
  - goldenimage.pipeline maintainers (@goldenimage)
options:
  state:
    description:
      - V(report) reports drift and changes nothing.
      - V(repaved) brings every instance in scope to its target revision.
      - V(absent) deletes a direct-mode VM and every OS and data disk it declared (O(strategy=direct) only;
        with the operator, delete the DBInstance and let the operator tear it down).
      - O(catalog) is required unless O(state=absent).
    type: str
    choices: [report, repaved, absent]
    default: report
  details:
    description:
      - How much of a O(state=report) report is returned.
      - V(full) returns an entry per instance in scope.
      - V(summary) returns only the instances that need attention, those that need more than an OS repave
        first, at most 1000 (RV(instances_omitted) counts the rest, current ones included); RV(summary)
        still counts every instance.
      - V(auto) is V(full) up to 1000 instances and V(summary) above, so a fleet-sized report stays quick to
        return through Ansible.
      - A roll-out (O(state=repaved)) always returns every instance.
    type: str
    choices: [auto, full, summary]
    default: auto
  namespace:
    description:
      - Namespace of the instances. Omitted, every namespace (not with O(strategy=direct)); instance names in
        the result are then C(<namespace>/<name>).
    type: str
  names:
    description:
      - Only these instances. Required with O(state=absent).
    type: list
    elements: str
  label_selector:
    description: Only instances matching this label selector.
    type: str
  strategy:
    description:
      - V(operator) triggers the DBInstance operator and waits for it.
      - V(direct) swaps the OS disk of Harvester VMs (C(kubevirt.io/v1) VirtualMachines named after the
        instances) without an operator. Such a VM says what it runs in its own annotations, where the
        operator's DBInstance has its spec and status - C(goldenimage.pipeline/engine-version) (the
        PostgreSQL major, as C(engineVersion)), C(goldenimage.pipeline/os-version) (its OS stream, unset
        to follow the default stream) and C(goldenimage.pipeline/image-revision) (the revision it runs,
        written by each repave). A VM without C(goldenimage.pipeline/engine-version) has no major the
        catalog can judge, so it is never repaved; set the annotation first.
    type: str
    choices: [operator, direct]
    default: operator
  revision:
    description:
      - An explicit target revision instead of the tip of each instance's stream, for example the previous
        revision to roll back a direct swap. It must be in the catalog and its stream validated.
      - With O(strategy=operator) only the tip is possible (the operator repaves to its catalog's tip).
    type: str
  max_unavailable:
    description:
      - How many instances may be unavailable at once, a count (V(2)) or a percentage of the instances in
        scope (V(10%), rounded down, at least 1). Instances already unavailable count.
    type: raw
    default: 1
  window:
    description:
      - The weekly maintenance window of the instances that carry none of their own (annotation
        C(goldenimage.pipeline/maintenance-window), which wins). No repave starts outside an instance's window
        (except with O(opt_in=immediate) or at the forced-apply date), nor when its estimated duration does
        not fit before the window closes; the module then ends without failing, with those instances reported
        as V(pending), why in RV(instances[].held), and RV(next_window).
      - Without it, instances without a window of their own are repaved only with O(opt_in=immediate) or at
        their forced-apply date.
      - With O(state=report), only used for RV(instances[].current_apply).
    type: dict
    suboptions:
      days:
        description: Weekdays the window opens on (V(mon) ... V(sun)); all days when omitted.
        type: list
        elements: str
      start:
        description: Wall-clock opening time, C(HH:MM).
        type: str
        required: true
      end:
        description: Wall-clock closing time, C(HH:MM); before O(window.start) it closes the next day.
        type: str
        required: true
      timezone:
        description: IANA time zone of the wall clock, for example C(Europe/Berlin); daylight saving counts.
        type: str
        default: UTC
  batch_estimate:
    description:
      - Seconds a batch is expected to take before any repave of this run has been measured, greater than
        zero; later batches use the longest repave measured in the run. Decides whether a batch fits the
        rest of O(window).
    type: int
    default: 600
  batch_pause:
    description: Seconds to wait between two batches; V(0) for no pause. A negative pause is refused.
    type: float
    default: 0
  order:
    description:
      - Groups repaved first, in this order (for example standbys before primaries); instances matching no
        group come last, by name.
    type: list
    elements: dict
    suboptions:
      label_selector:
        description: Label selector of the group.
        type: str
        required: true
  opt_in:
    description:
      - Like RDS C(apply-pending-maintenance-action). V(immediate) repaves the instances listed in O(names)
        now, outside any window; it is refused without O(names), so a window is only ever skipped for
        instances a run names. V(next-maintenance) repaves each instance inside its window (its own
        annotation, else O(window)); an instance with neither waits. Omitted, a run applies only what
        O(maintenance_policy) makes due (the auto-apply date passed, inside the instance's window; the
        forced-apply date come, whatever the window), which is what a scheduled run does. Both record the
        choice in the annotation C(goldenimage.pipeline/repave-opt-in) of each instance with a pending
        repave, which the report shows and which is removed once the repave is applied. V(undo-opt-in)
        removes the annotation and repaves nothing.
      - The annotation is a record; no run acts on it, each acts on its own O(opt_in). Before it starts, a
        run rewrites what an earlier (perhaps interrupted) run recorded so it says what this run intends;
        a recorded V(immediate) on an instance this run does not repave immediately is removed (or replaced
        by this run's V(next-maintenance)), an instance already on its target loses its opt-in, and an
        instance still repaving keeps it until the repave is applied.
      - Only with O(state=repaved).
    type: str
    choices: [immediate, next-maintenance, undo-opt-in]
  halt_on_failure:
    description:
      - Fail before writing anything when an instance is refused, and stop the roll-out after a batch in which
        a repave failed.
      - V(false) reports refused and failed instances and goes on with the others.
    type: bool
    default: true
  purge_data:
    description:
      - With O(state=absent), also delete data disks. Without it the module refuses, deleting nothing, and
        lists them with why each is data.
      - A claim is a data disk unless it is proven to be an OS disk (see O(os_volume)); the options naming
        volumes play no part in this.
    type: bool
    default: false
  wait:
    description:
      - With V(true), wait for every batch that may start to be repaved.
      - With V(false), take one step for each instance the first batch may start (set the trigger; in
        direct mode, the first step of the swap) and return with them as V(in-flight) and the others
        RV(pending); running the module again continues (instances in flight are never triggered twice).
      - Only with O(state=repaved); O(state=absent) always waits until the VM and its disks are gone.
    type: bool
    default: true
  wait_timeout:
    description:
      - Seconds to wait for one batch to be repaved, greater than zero (zero or negative is refused before
        anything is written). On timeout the module fails naming each instance still repaving, its phase,
        its repave step and its condition messages.
    type: int
    default: 900
  wait_sleep:
    description:
      - Longest pause, in seconds, between two polls, greater than zero. Polling starts after a quarter of
        a second and doubles up to this.
    type: float
    default: 2
  api_version:
    description: API version of the DBInstance custom resource.
    type: str
    default: db.goldenimage.io/v1alpha1
  kind:
    description: Kind of the DBInstance custom resource.
    type: str
    default: DBInstance
  trigger_annotation:
    description: The annotation the operator repaves on when it says C(now), and clears when done.
    type: str
    default: repave-trigger
  maintenance_policy:
    description:
      - When pending OS repaves are applied automatically, counted in days from the target revision's build
        date, reported as RV(instances[].auto_apply_after) and RV(instances[].forced_apply), and the
        migration deadline of instances on an end-of-life major.
    type: dict
    suboptions:
      auto_apply_after_days:
        description:
          - Days after the target was offered from which the repave may be applied automatically. Offered is
            the later of its build date and its last passing smoke test (the evidence of its validation), so
            a revision validated today whose name carries an old date is offered from today.
        type: int
      forced_apply_after_days:
        description:
          - Days after the target was offered by which the repave is applied whatever the opt-in and the
            window.
          - At least 1, and not before O(maintenance_policy.auto_apply_after_days); V(0) would force every
            repave the day a revision is offered and is refused (O(opt_in=immediate) with O(names) is the
            move for instances to repave now).
        type: int
      migration_deadline_months:
        description:
          - Months after the end of life of its PostgreSQL major by which an instance needing a major
            migration is deleted, reported as RV(instances[].migration_deadline); the same for a major the
            tip no longer carries (never counted from a build date).
        type: int
        default: 3
  today:
    description:
      - The date end-of-life is judged on, C(YYYY-MM-DD); today (UTC) on the run's clock when omitted.
      - Windows, auto-apply and forced-apply dates are always read from the run's one clock, the wall clock.
    type: str
  operator:
    description:
      - The DBInstance operator's Deployment. Its container's C(BACKING_IMAGE_OS_VERSION) is the OS stream of
        every instance that names none in C(spec.osVersion), as the operator uses it; unset, the catalog's
        C(default_stream) is. Without this option the catalog's C(default_stream) is used.
      - A Deployment that does not exist, several containers without O(operator.container), or a value read
        from C(valueFrom) are refused before anything is written.
    type: dict
    suboptions:
      namespace:
        description: Its namespace.
        type: str
        required: true
      name:
        description: Its name.
        type: str
        required: true
      container:
        description: The operator's container, when the Deployment has more than one.
        type: str
  os_volume:
    description:
      - With O(strategy=direct), the name of the VM's OS volume, the one whose claim is replaced.
      - It may only name a volume backed by a claim proven to be an OS disk. A claim is an OS disk when
        nothing marks it as data (label or annotation C(goldenimage.pipeline/disk-role=data)), it carries
        the Harvester annotation C(harvesterhci.io/imageId) naming an existing image, its StorageClass is
        that image's class, and it is attached as the VM's boot disk. Any other claim is data. A volume
        backed by a data claim is refused (C(NotAnOSDisk)) before anything is written, naming the claim,
        why it is data and the VM's OS volume.
      - A VM found with a data claim swapped out of its slot (recorded as a previous OS disk by an earlier
        run) first gets its original claim back.
    type: str
    default: rootdisk
  data_volume:
    description:
      - With O(strategy=direct), the volume named as the data disk in the result. Which claims hold data
        is decided from the claims themselves (see O(os_volume)), never from this name.
    type: str
    default: pgdata
  report_every:
    description:
      - Longest time, in seconds, one call of the module waits during a roll-out before it returns a
        progress C(line), greater than zero. The action plugin of the same name calls it again with
        C(resume) and prints each line, so a roll-out prints the fleet's counts, what is repaving (phase
        and step) and the elapsed time at least this often.
      - Each call plans again from what the cluster shows; only what the action plugin hands back
        (O(rollout_state)) carries over.
    type: int
    default: 20
  started:
    description:
      - When the roll-out began, in seconds since the epoch. Set by the action plugin; leave it out to start
        now.
    type: float
  rollout_state:
    description:
      - What one call of a roll-out hands the next (when each repave began, what was last seen of it, what
        finished, the result so far). Set by the action plugin from C(resume); never set it by hand.
    type: dict
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - goldenimage.pipeline.attributes
  - goldenimage.pipeline.attributes.actiongroup_k8s
  - goldenimage.pipeline.attributes.rounds
  - goldenimage.pipeline.catalog
attributes:
  check_mode:
    support: full
    details:
      - Writes nothing; returns the plan (RV(batches), RV(order), RV(window), RV(starts_now)) and C(changed)
        when anything would be repaved or an opt-in would change.
  diff_mode:
    support: full
    details:
      - The annotation changes per instance (the trigger and the opt-in; the applied revision in direct mode).
  idempotent:
    support: full
    details: Instances already on their target are not touched.
notes:
  - "Runs on the controller; use C(delegate_to: localhost) when the play targets other hosts."
  - The report sends one LIST of the instances and one read of the catalog, whatever the fleet size.
  - A stop, swap or start failure the operator retries by itself (it keeps the trigger) is waited through; a
    failure that clears the trigger ends the repave of that instance with the operator's reason.
seealso:
  - module: goldenimage.pipeline.baked_image_stream
  - module: goldenimage.pipeline.eol_guard
"""

EXAMPLES = r"""
- name: Which databases run an old image, and what to do about each
  goldenimage.pipeline.dbinstance_repave:
    namespace: customers
    catalog: {namespace: dbaas-system, name: baked-image-catalog}
    maintenance_policy: {auto_apply_after_days: 14, forced_apply_after_days: 45}
  register: drift

- name: Show the databases that need a PostgreSQL major migration, never a repave
  ansible.builtin.debug:
    msg: "{{ drift.instances | selectattr('verdict', 'equalto', 'PGVersionEOL') | map(attribute='name') }}"

- name: Repave one database now, outside its window, and wait for it
  goldenimage.pipeline.dbinstance_repave:
    state: repaved
    namespace: customers
    names: [orders-db]
    opt_in: immediate
    catalog: {namespace: dbaas-system, name: baked-image-catalog}
    wait_timeout: 600

- name: Scheduled run, each database in its own window once its auto-apply date has passed
  goldenimage.pipeline.dbinstance_repave:
    state: repaved
    namespace: customers
    catalog: {namespace: dbaas-system, name: baked-image-catalog}
    maintenance_policy: {auto_apply_after_days: 14, forced_apply_after_days: 45}

- name: Roll the fleet, standbys first, 10% at a time, Sunday night Berlin time
  goldenimage.pipeline.dbinstance_repave:
    state: repaved
    namespace: customers
    label_selector: tier=production
    catalog: {namespace: dbaas-system, name: baked-image-catalog}
    max_unavailable: 10%
    order:
      - label_selector: role=standby
    window: {days: [sun], start: "01:00", end: "05:00", timezone: Europe/Berlin}
    opt_in: next-maintenance
    batch_pause: 60

- name: Tear down a Harvester VM database with its disks
  goldenimage.pipeline.dbinstance_repave:
    state: absent
    strategy: direct
    namespace: customers
    names: [scratch-db]
    purge_data: true
"""

RETURN = r"""
changed:
  description: Whether an annotation (in direct mode, a VM or disk) was, or in check mode would be, written.
  returned: always
  type: bool
default_stream:
  description: The OS stream of instances that name none, and where it was read (O(operator)).
  returned: unless O(state=absent)
  type: dict
  contains:
    stream:
      description: The stream.
      type: str
      sample: "22.04"
    from:
      description: Where it was read.
      type: str
      sample: Deployment dbinstance-system/dbinstance-operator env BACKING_IMAGE_OS_VERSION
instances:
  description:
    - One entry per instance in scope, as found, with what the task did.
    - When RV(details) is V(summary), only the instances that need attention, at most 1000.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The instance (C(<namespace>/<name>) when O(namespace) is omitted).
      type: str
      sample: orders-db
    namespace:
      description: Its namespace.
      type: str
    revision:
      description: The image revision it runs (C(status.appliedSpec.imageRevision)).
      type: str
      sample: v20260615
    target:
      description: The revision it should run, or null when its stream is invalid.
      type: str
      sample: v20260815
    verdict:
      description:
        - V(Current), V(OSUpdateAvailable), V(PGVersionEOL), V(UnsupportedEngineVersion),
          V(EngineVersionUnknown) or V(InvalidOSStream).
      type: str
    action:
      description: V(os-repave), V(pg-major-migration), V(recreate) or null.
      type: str
    description:
      description: One sentence on the verdict and the supported move.
      type: str
    engine_version:
      description: The PostgreSQL major it runs.
      type: str
      sample: "16"
    os_stream:
      description: The OS stream it should run (its own or the catalog's default).
      type: str
      sample: "22.04"
    phase:
      description: C(status.phase).
      type: str
      sample: Available
    operator:
      description:
        - The CR's own conditions by type, each with C(status), C(reason), C(message) (empty in direct mode).
      type: dict
    disagreement:
      description: Why the operator's drift conditions disagree with this catalog, or null.
      type: str
    opt_in:
      description: The recorded opt-in (V(immediate), V(next-maintenance)) or null.
      type: str
    auto_apply_after:
      description: From O(maintenance_policy), the date from which the repave may be applied automatically.
      type: str
      sample: "2026-08-29"
    forced_apply:
      description: From O(maintenance_policy), the date by which the repave is applied.
      type: str
    applied_by:
      description:
        - What started its repave in this run, V(immediate), V(forced-apply), V(next-maintenance) or
          V(auto-apply); null when it did not start.
      type: str
      returned: with state repaved
    held:
      description:
        - Why its pending repave did not start in this run, V(NoMaintenanceWindow), V(WindowClosed) or
          V(NotDue); RV(instances[].held_why) says it in a sentence.
      type: str
      returned: when held with state repaved
    held_why:
      description: Why it was held, in one sentence with the supported move.
      type: str
      returned: when held with state repaved
    current_apply:
      description:
        - Like RDS's CurrentApplyDate, when the pending repave is applied as things stand (UTC, ISO 8601), or
          null. Now with the recorded opt-in V(immediate); the next opening of O(window) with
          V(next-maintenance); else the earlier of the first window opening from
          RV(instances[].auto_apply_after) on and RV(instances[].forced_apply).
      type: str
      sample: "2026-08-29T23:00:00Z"
    migration_deadline:
      description:
        - For V(PGVersionEOL), the date by which the instance is deleted whatever its owner does
          (O(maintenance_policy.migration_deadline_months) after its major's end of life, also when the tip
          dropped the major before that).
      type: str
      sample: "2027-02-12"
    eol_date:
      description: End-of-life date of its PostgreSQL major.
      type: str
      sample: "2028-11-09"
    result:
      description:
        - What the task did, null for O(state=report). V(current), V(repaved), V(refused), V(failed),
          V(timed-out), V(pending) (left for the next window), V(in-flight) and V(would-repave) (check mode),
          V(opt-in) (only the opt-in changed), V(skipped) (never created, V(UnsupportedEngineVersion)),
          V(deleted) and V(absent) (O(state=absent)).
      type: str
    reason:
      description:
        - The refusal rule (V(InvalidOSStream), V(UntrustedImage), V(EngineVersionUnknown),
          V(RepaveBlockedPGVersionEOL), V(NotAvailable); in direct
          mode V(NotAnOSDisk)), or V(UnsupportedEngineVersion) for a skipped instance.
      type: str
      returned: when refused or skipped
    message:
      description: Why it was refused or failed.
      type: str
      returned: when refused or failed
    batch:
      description: Index of its batch in RV(batches).
      type: int
      returned: when planned
    stuck:
      description: For V(timed-out), whether it showed no progress (state, phase, step, message) for half
        O(wait_timeout) or a minute before the timeout.
      type: bool
      returned: when timed out
    duration:
      description: Seconds its repave took.
      type: float
      returned: when repaved or failed
    pvcs:
      description: The claims of the VM (O(state=absent)).
      type: list
      elements: str
      returned: with state absent
    data_pvcs:
      description: The claims that are data (not proven to be OS disks), deleted only with O(purge_data).
      type: list
      elements: str
      returned: with state absent
    disk_roles:
      description: Per claim, its C(role) (V(os) or V(data)) and C(why) (what proves or fails to prove it).
      type: dict
      returned: with state absent
msg:
  description:
    - With no instance in scope, says so (the namespace, selector and names it looked in).
    - When a roll-out started nothing, why each instance was held.
  returned: when no instance is in scope or nothing started
  type: str
  sample: "no DBInstance in scope (namespace customers; label selector tier=prod): nothing to repave"
intent:
  description:
    - What the roll-out was asked to do and what started each repave. C(opt_in) (null when only the
      maintenance policy applies), C(names), C(window) (the run's), C(maintenance_policy), C(now) (the run's
      clock when it started, UTC) and C(applied_by) (instance to V(immediate), V(forced-apply),
      V(next-maintenance) or V(auto-apply)).
  returned: with state repaved
  type: dict
  sample: {opt_in: null, names: [], now: "2026-12-01T12:00:00Z", applied_by: {orders-db: forced-apply}}
summary:
  description: Number of instances per verdict.
  returned: always
  type: dict
  sample: {Current: 40, OSUpdateAvailable: 9, PGVersionEOL: 1}
details:
  description: How much of the report was returned, V(full) or V(summary) (see O(details)).
  returned: with O(state=report)
  type: str
  sample: summary
instances_omitted:
  description: Instances left out of RV(instances) by the summary, the current ones included.
  returned: when RV(details) is V(summary)
  type: int
  sample: 98000
missing:
  description: Names given in O(names) that were not found.
  returned: always
  type: list
  elements: str
started:
  description:
    - One line on what started each repave (in check mode, would start it) and what is still pending, with
      the next window.
  returned: with state repaved
  type: str
  sample: "started: orders-db (forced-apply), billing-db (next-maintenance); still pending: ledger-db
    (next window 2026-08-30T23:00:00Z)"
batches:
  description: The roll-out plan, lists of instance names in order; instances already repaving lead the first.
  returned: with state repaved
  type: list
  elements: list
  sample: [[standby-1, standby-2], [primary-1, primary-2]]
order:
  description: The planned instances in the order they are repaved.
  returned: with state repaved
  type: list
  elements: str
max_unavailable:
  description: O(max_unavailable) resolved to a count.
  returned: with state repaved
  type: int
starts_now:
  description: The instances the first batch would trigger now (check mode).
  returned: with state repaved in check mode
  type: list
  elements: str
resumes:
  description: Instances found repaving (an interrupted run) that are waited on, never triggered again.
  returned: with state repaved
  type: list
  elements: str
pending:
  description:
    - Instances not started because the window closed or the next batch would not fit in it, or (with
      O(wait=false)) because they are in a later batch.
  returned: with state repaved
  type: list
  elements: str
window:
  description: The window and whether it is open (C(spec), C(describe), C(open), C(closes_at), C(next_open)).
  returned: with state repaved and a window
  type: dict
next_window:
  description: When the pending instances can start (UTC, ISO 8601), or null.
  returned: with state repaved
  type: str
  sample: "2026-08-30T23:00:00Z"
progress:
  description:
    - Each change of an instance during the roll-out (C(seconds), C(name), C(state), C(phase), C(step)) with
      the fleet's progress (C(done), C(total), C(percent)).
    - While batches run, at least every 30 seconds a fleet record (C(state=fleet), C(name) null) with the
      counts, C(repaving) (each instance repaving, its phase and step), C(failed), C(waiting) (instances of
      batches not started yet) and C(seconds) since the roll-out started; the same line goes to the module's
      debug log.
  returned: always
  type: list
  elements: dict
line:
  description:
    - "The fleet line of the last round, for example C(fleet: 3/50 repaved (6%), 5 repaving (db-07: Repaving
      (StoppingVM); ...), 0 failed, 42 not started; batch db-04, db-05; elapsed 95s)."
  returned: with state repaved
  type: str
lines:
  description: Every line the action plugin printed, one per round.
  returned: always
  type: list
  elements: str
rounds:
  description: How many calls of the module the task took.
  returned: always
  type: int
done:
  description: Whether the task is over; false in a round that returns to be called again.
  returned: always
  type: bool
resume:
  description: The options that continue the roll-out in another call (O(rollout_state), O(started)).
  returned: when the roll-out is not over
  type: dict
diff:
  description:
    - Per instance, the watched annotations before and after. With O(strategy=direct) also what the steps
      changed on the VM and its claims - the OS volume's claim (C(volume <name> claim), the swap), the run
      strategy, and each claim deleted (C(claim <name>) in C(before) with its phase, gone from C(after)).
  returned: when diff mode is on
  type: list
"""

import datetime
import time

from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import catalog, operator_env
from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked._catalog_store import (
    CatalogStore,
    catalog_options,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import details, inputs, rounds
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common._gc import paused_gc
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import (
    PipelineError,
    Refusal,
    run_module,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._kube import KubeModule
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import _signing as signing
from ansible_collections.goldenimage.pipeline.plugins.module_utils.repave import repave, rollout
from ansible_collections.goldenimage.pipeline.plugins.module_utils.repave._repave_direct import DirectDriver
from ansible_collections.goldenimage.pipeline.plugins.module_utils.repave._repave_operator import (
    OPT_IN_ANNOTATION,
    OperatorDriver,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.repave._repave_rollout import (
    Rollout,
    RolloutHalted,
)

REVISION_ANNOTATION = "goldenimage.pipeline/image-revision"


def argument_spec():
    return dict(
        state=dict(type="str", choices=["report", "repaved", "absent"], default="report"),
        details=dict(type="str", choices=list(details.DETAILS), default="auto"),
        namespace=dict(type="str"),
        names=dict(type="list", elements="str"),
        label_selector=dict(type="str"),
        catalog=catalog_options(),
        strategy=dict(type="str", choices=["operator", "direct"], default="operator"),
        revision=dict(type="str"),
        max_unavailable=dict(type="raw", default=1),
        window=dict(
            type="dict",
            options=dict(
                days=dict(type="list", elements="str"),
                start=dict(type="str", required=True),
                end=dict(type="str", required=True),
                timezone=dict(type="str", default="UTC"),
            ),
        ),
        batch_estimate=dict(type="int", default=600),
        batch_pause=dict(type="float", default=0),
        order=dict(
            type="list", elements="dict", options=dict(label_selector=dict(type="str", required=True))
        ),
        opt_in=dict(type="str", choices=["immediate", "next-maintenance", "undo-opt-in"]),
        halt_on_failure=dict(type="bool", default=True),
        purge_data=dict(type="bool", default=False),
        **inputs.wait_arg_spec(900, 2),
        api_version=dict(type="str", default="db.goldenimage.io/v1alpha1"),
        kind=dict(type="str", default="DBInstance"),
        trigger_annotation=dict(type="str", default="repave-trigger"),
        maintenance_policy=dict(
            type="dict",
            options=dict(
                auto_apply_after_days=dict(type="int"),
                forced_apply_after_days=dict(type="int"),
                migration_deadline_months=dict(type="int", default=3),
            ),
        ),
        today=dict(type="str"),
        operator=dict(
            type="dict",
            options=dict(
                namespace=dict(type="str", required=True),
                name=dict(type="str", required=True),
                container=dict(type="str"),
            ),
        ),
        os_volume=dict(type="str", default="rootdisk"),
        data_volume=dict(type="str", default="pgdata"),
        report_every=dict(type="int", default=rounds.REPORT_EVERY),
        started=dict(type="float"),
        rollout_state=dict(type="dict"),
    )


def make_driver(module):
    driver = DirectDriver if module.params["strategy"] == "direct" else OperatorDriver
    # The drivers read and write through the module's helpers; the client is built only when a write
    # needs it, so a report reads over the raw path.
    return driver(module, None, module.params)


class Repave:
    """The module's runner: ``run()`` returns the result or raises a ``PipelineError`` carrying it.

    ``driver`` (the operator or the direct driver) and ``doc`` (the catalog) are built from the module
    when not given, so a test can run it with observed state of its own."""

    def __init__(self, module, driver=None, doc=None, clock=time.time):
        self.module = module
        self.params = module.params
        self.clock = clock
        self.round_end = clock() + (self.params.get("report_every") or rounds.REPORT_EVERY)
        # A later round of a roll-out continues the result of the earlier ones (rollout_state).
        self.carried = dict(self.params.get("rollout_state") or {})
        self.result = self.carried.get("result") or {
            "changed": False,
            "instances": [],
            "summary": {},
            "missing": [],
            "progress": [],
        }
        self.entries = self.carried.get("entries") or {}
        self.diffs = self.carried.get("diffs") or {}
        self.warnings = list(self.carried.get("warnings") or [])
        self.doc = doc
        self.driver = driver
        self.window = None
        # Each instance's window (its own annotation, else the run's) and why one cannot be read.
        self.windows = {}
        self.bad_windows = {}

    def now(self):
        """The one clock of the run: every date and window of it is read from ``clock``."""
        return datetime.datetime.fromtimestamp(self.clock(), datetime.timezone.utc)

    def today(self):
        """The date end-of-life is judged on: the today option, else the run's clock (UTC)."""
        return self.params["today"] or self.now().date().isoformat()

    def run(self):
        try:
            self.window = repave.check_request(self.params)
            if self.driver is None:
                self.driver = make_driver(self.module)
            if self.params["state"] != "absent" and self.doc is None:
                self.doc = self.with_operator_default(self.read_catalog())
            state = self.params["state"]
            return (
                self.report()
                if state == "report"
                else self.repaved()
                if state == "repaved"
                else self.absent()
            )
        except PipelineError as exc:
            for name, value in self.finish().items():
                exc.fields.setdefault(name, value)
            raise

    def warn(self, text):
        """Warnings are given once, with the roll-out's last round (a round's warnings end with it)."""
        if text not in self.warnings:
            self.warnings.append(text)

    # --- plumbing shared with the roll-out

    def key(self, inst):
        if self.params["namespace"]:
            return inst["name"]
        return "%s/%s" % (inst.get("namespace"), inst["name"])

    def scope(self):
        return self.driver.list(self.params["names"], self.params["label_selector"])

    def finish(self):
        for text in self.warnings:
            self.module.warn(text)
        self.warnings = []
        self.result["done"] = True
        self.result["instances"] = list(self.entries.values())
        summary = {}
        for entry in self.entries.values():
            if entry.get("verdict"):
                summary[entry["verdict"]] = summary.get(entry["verdict"], 0) + 1
        self.result["summary"] = summary
        if "intent" in self.result:
            self.result["intent"]["applied_by"] = {
                k: e["applied_by"] for k, e in self.entries.items() if e.get("applied_by")
            }
            held = repave.held_message(self.entries)
            if held and not self.result["intent"]["applied_by"] and not self.result.get("resumes"):
                self.result["msg"] = held
            self.result["started"] = repave.rollout_line(
                self.result["intent"]["applied_by"],
                self.result.get("pending") or [],
                self.result.get("next_window"),
                self.module.check_mode,
            )
        if self.module._diff:
            self.result["diff"] = list(self.diffs.values())
        return self.result

    def note(self, inst, changes, view=None):
        """Note writes for --diff: ``changes`` maps an annotation to its value (None: removed); ``view`` is
        what a step changed on the VM and its claims, ``{field: (before, after)}``."""
        key = self.key(inst)
        diff = self.diffs.get(key)
        if diff is None:
            watched = (OPT_IN_ANNOTATION, self.params["trigger_annotation"], REVISION_ANNOTATION)
            found = inst.get("annotations") or {}
            before = {k: found[k] for k in watched if k in found}
            where = "%s %s" % (self.params["kind"], key)
            diff = {"before_header": where, "after_header": where, "before": before, "after": dict(before)}
            self.diffs[key] = diff
        for name, (before, after) in (view or {}).items():
            diff["before"].setdefault(name, before)
            changes = dict(changes, **{name: after})
        for name, value in changes.items():
            if value is None:
                diff["after"].pop(name, None)
            else:
                diff["after"][name] = value

    def record_write(self, inst, target, view=None):
        if self.params["strategy"] == "operator":
            self.note(inst, {self.params["trigger_annotation"]: "now"})
        else:
            self.note(inst, {REVISION_ANNOTATION: target["revision"]}, view)

    def set_opt_in(self, inst, value):
        if self.driver.set_opt_in(inst, value):
            self.result["changed"] = True
            self.note(inst, {OPT_IN_ANNOTATION: value})
            return True
        return False

    def apply(self, events, instances, targets):
        """Take in what the roll-out reports (see ``Rollout``)."""
        for event in events:
            kind, key = event["event"], event.get("key")
            if kind == "entry":
                self.entries[key].update(event["fields"])
            elif kind == "write":
                if not event.get("predicted"):
                    self.result["changed"] = True
                self.record_write(instances[key], targets[key], event.get("diff"))
            elif kind == "opt-in":
                self.result["changed"] = True
                self.note(instances[key], {OPT_IN_ANNOTATION: event["value"]})
            elif kind == "progress":
                self.result["progress"].append(event["record"])
            elif kind == "warning":
                self.warn(event["text"])
            elif kind == "result":
                self.result.update(event["fields"])
            elif kind == "round":
                return event["state"]
        return None

    def next_round(self, carry, line):
        """The round ended before the roll-out: what the action plugin hands the next call."""
        state = {
            "rollout": carry,
            "result": self.result,
            "entries": self.entries,
            "diffs": self.diffs,
            "warnings": self.warnings,
        }
        summary = {}
        for entry in self.entries.values():
            if entry.get("verdict"):
                summary[entry["verdict"]] = summary.get(entry["verdict"], 0) + 1
        return {
            "changed": self.result["changed"],
            "done": False,
            "line": line,
            "summary": summary,
            "resume": {"rollout_state": state, "started": carry["started"]},
        }

    # --- reading

    def read_catalog(self):
        store = CatalogStore(self.module, self.params["catalog"])
        try:
            doc = store.read()
        except catalog.CatalogError as exc:
            raise PipelineError("read %s: %s" % (store.where, exc)) from exc
        if not doc["streams"]:
            raise repave.empty_catalog(store.where)
        return doc

    def with_operator_default(self, doc):
        """The catalog with the default OS stream the operator gives an instance that names none
        (``operator_env.default_stream``): targets are computed where the operator provisions."""
        found = {"stream": doc.get("default_stream"), "from": "the catalog's default_stream"}
        wanted = self.params.get("operator")
        if wanted:
            ref = operator_env.where(wanted["namespace"], wanted["name"])
            deployment = operator_env.require_deployment(
                ref, self.module.fetch("apps/v1", "Deployment", wanted["name"], wanted["namespace"])
            )
            container = operator_env.pick_container(deployment, wanted.get("container"))
            value = operator_env.os_version_of(deployment, container)
            stream = operator_env.default_stream(doc.get("default_stream"), value)
            if value:
                found = {"stream": stream, "from": "%s env %s" % (ref, operator_env.OS_ENV)}
            else:
                found["from"] += " (%s sets no %s)" % (ref, operator_env.OS_ENV)
            doc = dict(doc, default_stream=stream)
        self.result["default_stream"] = found
        return doc

    def observe(self):
        p = self.params
        instances = self.scope()
        if self.carried:
            # A later round: the entries (verdicts as first found) are the first round's.
            return instances
        self.result["missing"] = sorted(set(p["names"] or []) - {i["name"] for i in instances})
        policy = {k: v for k, v in (p["maintenance_policy"] or {}).items() if v is not None}
        now = self.now()
        for inst in instances:
            try:
                found = repave.drift(inst, self.doc, self.today(), None, policy)
            except PipelineError as exc:
                raise Refusal(None, exc.msg) from exc
            window = self.window_of(inst)
            found["current_apply"] = repave.current_apply(found, inst.get("opt_in"), window, now)
            operator = inst.get("operator") or {}
            disagreement = None
            if p["strategy"] == "operator":
                disagreement = repave.operator_disagreement(found["verdict"], operator)
            self.entries[self.key(inst)] = repave.entry(inst, self.key(inst), self.doc, found, disagreement)
            if disagreement:
                self.warn("%s: %s" % (self.key(inst), disagreement))
        if not instances and not p["names"]:
            self.result["msg"] = repave.empty_scope(p)
        return instances

    def window_of(self, inst):
        """The instance's own window (annotation), else the run's; an unreadable annotation is kept as
        the instance's refusal and the run's window is not used in its place."""
        key = self.key(inst)
        if key not in self.windows:
            try:
                self.windows[key] = rollout.own_window(inst) or self.window
            except PipelineError as exc:
                self.windows[key] = None
                self.bad_windows[key] = repave.bad_window(inst, exc)
        return self.windows[key]

    # --- state=report

    def report(self):
        with paused_gc():  # a fleet's entries are many small dicts without cycles
            self.observe()
        for name in self.result["missing"]:
            self.warn("%s %s was not found" % (self.params["kind"], name))
        result = self.finish()
        level = details.detail_level(self.params.get("details") or "auto", len(result["instances"]))
        if level == "summary":
            result["instances"], result["instances_omitted"] = repave.condense_report(result["instances"])
        result["details"] = level
        return result

    # --- state=repaved

    def vetoes(self, instances):
        """The driver's own refusals (direct mode: an os_volume that is not a proven OS disk)."""
        check = getattr(self.driver, "preflight", None)
        found = {}
        for inst in instances if check is not None else ():
            try:
                check(inst)
            except repave.RepaveRefused as exc:
                found[self.key(inst)] = exc
        for key, exc in self.bad_windows.items():
            found.setdefault(key, exc)
        return found

    def repaved(self):
        p = self.params
        instances = self.observe()
        if self.result["missing"]:
            raise repave.missing_refusal(p["kind"], p["namespace"], self.result["missing"])
        if not instances:
            self.warn(self.result.get("msg") or repave.empty_scope(p))
            return self.finish()
        by_key = {self.key(i): i for i in instances}
        if p["opt_in"] == "undo-opt-in":
            for inst in instances:
                changed = self.set_opt_in(inst, None)
                self.entries[self.key(inst)].update(opt_in=None, result="opt-in" if changed else "unchanged")
            return self.finish()
        try:
            limit = rollout.parse_max_unavailable(p["max_unavailable"], len(instances))
        except PipelineError as exc:
            raise Refusal(None, exc.msg) from exc
        found = repave.classify(
            instances,
            self.doc,
            self.key,
            signing.record_proof,
            p["revision"],
            p["strategy"] == "operator",
            self.today(),
            self.vetoes(instances),
        )
        carry = self.carried.get("rollout") or {}
        landed = []
        if carry:
            found, landed = rollout.resume_plan(found, carry.get("since"), carry.get("finished"))
        for key, fields in found["entries"].items():
            if key not in self.entries:
                continue  # appeared since the first round: it is not part of this roll-out
            if not carry or (fields.get("result") == "refused" and not self.entries[key].get("result")):
                self.entries[key].update(fields)
        if found["refused"]:
            if p["halt_on_failure"]:
                raise repave.refused_all(found["refused"])
            for exc in found["refused"]:
                self.warn("skipped: %s" % exc)
        for key, value in repave.opt_in_changes(instances, self.key, found, p["opt_in"]).items():
            if self.set_opt_in(by_key[key], value):
                self.entries[key]["opt_in"] = value
        targets, in_flight = found["targets"], found["in_flight"]
        plan = Rollout(
            self.driver,
            p,
            instances,
            self.key,
            self.scope,
            targets,
            in_flight,
            limit,
            self.window,
            log=self.module.debug,
            clock=self.clock,
            round_end=self.round_end if p["wait"] and not self.module.check_mode else None,
            carried=carry,
            windows={k: self.window_of(i) for k, i in by_key.items()},
            due={k: self.entries.get(k) or {} for k in by_key},
            replication={k: rollout.replication_group(i) for k, i in by_key.items()},
            peers=lambda: self.driver.list(None, None),
        )
        try:
            batches = plan.plan(found["candidates"])
        except PipelineError as exc:  # an order group's selector it cannot read
            raise Refusal(None, exc.msg) from exc
        if not carry:
            self.result.update(
                batches=batches,
                order=[k for b in batches for k in b],
                max_unavailable=limit,
                resumes=sorted(in_flight),
                intent=repave.intent(p, self.window, self.now()),
            )
        self.result.update(pending=[], next_window=None)
        if self.module.check_mode:
            self.apply(plan.predict(batches), by_key, targets)
            if self.result["starts_now"]:
                self.result["changed"] = True
            return self.finish()
        try:
            plan.landed(landed)
            events = plan.run(batches)
        except PipelineError as exc:  # halted, or a request failed: what happened until then is reported
            self.apply(exc.events if isinstance(exc, RolloutHalted) else plan.take(), plan.instances, targets)
            raise
        carry = self.apply(events, plan.instances, targets)
        if carry is not None:
            return self.next_round(carry, plan.line)
        self.result["line"] = plan.line
        return self.finish()

    # --- state=absent (direct)

    def absent(self):
        p = self.params
        found = {i["name"]: i for i in self.scope()}
        for name in p["names"]:
            inst = found.get(name) or {
                "name": name,
                "namespace": p["namespace"],
                "annotations": {},
                "labels": {},
                "available": False,
            }
            outcome = dict(self.driver.teardown(inst, p["purge_data"]) or {})
            changed = bool(outcome.pop("changed", False))
            self.result["changed"] = self.result["changed"] or changed
            entry = {"name": name, "namespace": p["namespace"], "result": "deleted" if changed else "absent"}
            entry.update(outcome)
            self.entries[name] = entry
        return self.finish()


def main():
    module = KubeModule(argument_spec=argument_spec(), supports_check_mode=True)
    run_module(module, lambda: Repave(module).run())


if __name__ == "__main__":
    main()
