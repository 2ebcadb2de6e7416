"""The name of every Celery task, in one place (issue 19).

Senders (services through the outbox, beat, ``send_task``), routes and the ``@clicklab_task`` decorators all
use these constants, so a task is renamed here or nowhere. Django-free and import-free: settings.py reads it
while the settings load. tests/tasks/test_names.py checks every name is a registered task.
"""

#: Evaluate one benchmark instance on the ``models`` queue (sent by ``python -m benchmark run --celery``).
#: benchmark/engine.py keeps the same string as ``CELERY_TASK_NAME``: the library may not import the web app.
BENCHMARK_EVALUATE_INSTANCE = "tasks.benchmark.benchmark_evaluate_instance"
#: Run simulated annotators over HTTP on a draft study (the study page's button, issue 32 item 4).
BOTS_RUN_BOTS = "tasks.bots.run_bots"
#: Make a corrective item's mask after a round (``models`` queue, issue 17).
CORRECTIVE_UPDATE_ITEM = "tasks.corrective.update_item"
#: Beat: send the mask update again for corrective items still waiting for one.
CORRECTIVE_REQUEUE_PENDING_UPDATES = "tasks.corrective.requeue_pending_updates"
#: Import a dataset asked for in the researcher area (an uploaded archive or a folder under the import root).
DATASETS_IMPORT_DATASET = "tasks.datasets.import_dataset"
#: Score a large evaluation-server submission and prepare its next interaction.
EVALUATION_PROCESS_RUN = "tasks.evaluation.process_run"
#: Beat: send the task intents the broker has not taken yet (the transactional outbox).
OUTBOX_RELAY_TASK_INTENTS = "tasks.outbox.relay_task_intents"
#: Put a worker's corrective qualification result on the platform (Toloka skill, issue 17).
PLATFORMS_QUALIFICATION_SEND = "tasks.platforms.qualification_send"
#: Beat: send one ``PLATFORMS_SYNC_STUDY`` per campaign that may have work to review.
PLATFORMS_SYNC_OPEN_CAMPAIGNS = "tasks.platforms.sync_open_campaigns"
#: Sync one study with its crowd platform (review submissions, apply decisions).
PLATFORMS_SYNC_STUDY = "tasks.platforms.sync_study"
#: Build round k+1 from round k's clicks (``models`` queue).
SEGMENTATION_BUILD_NEXT_ROUND = "tasks.segmentation.build_next_round"
#: Beat: send the build again for closed rounds whose next round is missing.
SEGMENTATION_REQUEUE_PENDING_BUILDS = "tasks.segmentation.requeue_pending_builds"
#: Beat: expire sessions past their ``expires_at`` and release their targets.
SESSIONS_EXPIRE_SESSIONS = "tasks.sessions.expire_sessions"
#: Beat: give back the unclicked slots of running sessions not heard from for their study's grace period.
SESSIONS_RELEASE_STALE = "tasks.sessions.release_stale"
#: Render the display image and phase-B picture of a round's targets.
STIMULI_RENDER_ROUND_STIMULI = "tasks.stimuli.render_round_stimuli"
#: Validate a finished session (click validity, the 7/10 rule, quality flags).
VALIDATION_VALIDATE_SESSION = "tasks.validation.validate_session"
#: Beat: send validation again for sessions finished long ago and still unvalidated.
VALIDATION_REQUEUE_PENDING_VALIDATIONS = "tasks.validation.requeue_pending_validations"
