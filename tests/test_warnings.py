import logging

from lect_mm._warnings import silence_known_log_messages


def test_known_mmengine_deprecations_are_dropped_others_kept(caplog):
    logger = logging.getLogger('lect_mm_test_quiet')
    silence_known_log_messages(logger)
    silence_known_log_messages(logger)  # idempotent
    assert len(logger.filters) == 1
    with caplog.at_level(logging.WARNING, logger=logger.name):
        logger.warning('"FileClient" will be deprecated in future. Please use')
        logger.warning('"HardDiskBackend" is the alias of "LocalBackend" and')
        logger.warning('something users must read')
    assert [r.getMessage() for r in caplog.records] == [
        'something users must read'
    ]
