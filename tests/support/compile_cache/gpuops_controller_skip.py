"""A task that its ``when`` skips, decided by ansible-playbook without forking a worker for it (issue 49), armed by this
directory's sitecustomize.py where the compile cache is on (``GPUOPS_TEST_COMPILE_CACHE``); ``GPUOPS_TEST_CONTROLLER_SKIP=off``
leaves ansible-core's strategy alone.

Why: ansible-core forks a worker for every task on every host, and the worker evaluates the task's ``when`` before
anything else: a skipped task costs a whole fork. In a lab converge from scratch 95 of the 201 workers only skipped
their task (a node without a cluster, a driver or a toolkit to manage skips most of the role's tasks); on the slow
machine kind most of a worker's cost is the kernel's copy-on-write of the parent's pages that the child touches.

How: ``StrategyBase._queue_task`` (every strategy queues a task through it) first does, in ansible-playbook, what the
worker's TaskExecutor does before it evaluates the conditional (ansible-core 2.19's ``TaskExecutor.__init__``,
``_calculate_delegate_to`` and the start of ``_execute_internal``): a copy of the task squashed, the delegated host's
variables added, the play context's magic variables, then the task's ``_resolve_conditional`` with those variables.
Where that says the task is skipped, the strategy gets the worker's result for it: the same result dictionary
(``changed``, ``skipped``, ``skip_reason``, ``false_condition``, ``_ansible_no_log``), through the same result queue, after
the same ``v2_runner_on_start`` callback, so the callbacks, ``register`` and the play see what a worker would have sent.
Everything else goes to a worker as before: a task without ``when``, a loop (its ``when`` is per item), a conditional
that is true, that fails to evaluate, or that warns (the worker reports those), and every ansible-core but 2.19 (whose
internals this follows; ``INTERNALS``).
"""
import sys

INTERNALS = "2.19."   # the ansible-core whose TaskExecutor this follows (the main version, requirements-lab.txt)
SKIP_REASON = "Conditional result was False"


class ControllerSkip(object):
    """Wraps ``strategy_base._queue_task``; ``skipped`` counts the tasks this process decided without a worker."""

    def __init__(self, strategy_base):
        # ansible-core's own pieces, as its TaskExecutor imports them
        from ansible.errors import AnsibleError   # pylint: disable=import-outside-toplevel
        from ansible.executor.task_result import _RawTaskResult   # pylint: disable=import-outside-toplevel
        from ansible._internal import _display_utils   # pylint: disable=import-outside-toplevel
        from ansible._internal._templating._engine import TemplateEngine   # pylint: disable=import-outside-toplevel
        self.error = AnsibleError
        self.raw_result = _RawTaskResult
        self.warnings = _display_utils.DeferredWarningContext
        self.engine = TemplateEngine
        self.skipped = 0
        real = strategy_base._queue_task
        decide = self

        def _queue_task(strategy, host, task, task_vars, play_context):
            if decide.skip(strategy, host, task, task_vars, play_context):
                return None
            return real(strategy, host, task, task_vars, play_context)

        _queue_task.__wrapped__ = real
        strategy_base._queue_task = _queue_task

    def skip_result(self, strategy, host, task, task_vars, play_context):
        """The worker's result for ``task`` on ``host`` where its conditional is false, else None."""
        if not task.when or task.loop is not None or task.loop_with:
            return None
        squashed = task.copy(exclude_tasks=True)
        squashed.squash()
        variables = dict(task_vars)
        templar = self.engine(loader=strategy._loader, variables=variables)
        delegated_vars, delegated_host = strategy._variable_manager.get_delegated_vars_and_hostname(
            templar, squashed, variables)
        squashed.delegate_to = delegated_host
        variables.update(delegated_vars)
        tempvars = variables.copy()
        try:
            context = play_context.set_task_and_variable_override(task=squashed, variables=variables, templar=templar)
            context.post_validate(templar=templar)
            if not context.remote_addr:
                context.remote_addr = host.address
            context.update_vars(tempvars)
        except self.error:
            pass   # the worker keeps this error for a task that runs; a skipped one never raises it
        found = {}
        with self.warnings(variables=variables) as captured:
            if squashed._resolve_conditional(squashed.when, tempvars, result_context=found):
                return None
            if captured.get_warnings() or captured.get_deprecation_warnings():
                return None
        result = dict(changed=False, skipped=True, skip_reason=SKIP_REASON)
        result.update(found)
        squashed.update_result_no_log(templar, result)
        return squashed, result

    def skip(self, strategy, host, task, task_vars, play_context):
        """Sends the skipped result of ``task`` where its conditional is false (True), or leaves it to a worker."""
        try:
            decided = self.skip_result(strategy, host, task, task_vars, play_context)
        except Exception:   # pylint: disable=broad-except
            decided = None   # the worker evaluates it again and reports what is wrong
        if decided is None:
            return False
        squashed, result = decided
        strategy._queued_task_cache[(host.name, task._uuid)] = {
            'host': host, 'task': task, 'task_vars': task_vars, 'play_context': play_context}
        strategy._tqm.send_callback('v2_runner_on_start', host, task)
        strategy._final_q.send_task_result(self.raw_result(host=host, task=squashed, return_data=result,
                                                           task_fields=squashed.dump_attrs()))
        strategy._pending_results += 1
        self.skipped += 1
        return True


def install(strategy_module):
    """Wraps the strategies' ``_queue_task`` in ansible-core 2.19 (returns the ControllerSkip); None elsewhere."""
    from ansible.release import __version__   # pylint: disable=import-outside-toplevel
    if not __version__.startswith(INTERNALS):
        return None
    base = strategy_module.StrategyBase
    if getattr(base._queue_task, "__wrapped__", None) is not None:
        return None
    return ControllerSkip(base)


if __name__ == "__main__":   # pragma: no cover
    sys.exit("imported by sitecustomize.py")
