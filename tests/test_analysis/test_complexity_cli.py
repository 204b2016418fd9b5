"""add_shape_argument: the --shape option of tools/analysis_tools."""
import argparse

import pytest

from lect_mm.analysis import add_shape_argument


def _parser():
    parser = argparse.ArgumentParser(prog='tool')
    add_shape_argument(parser)
    return parser


@pytest.mark.parametrize('argv, shape', [([], [224, 224]),
                                         (['--shape', '64'], [64, 64]),
                                         (['--shape', '96', '80'], [96, 80])])
def test_shape(argv, shape):
    assert _parser().parse_args(argv).shape == shape


def test_three_values_are_refused(capsys):
    with pytest.raises(SystemExit):
        _parser().parse_args(['--shape', '1', '2', '3'])
    assert '--shape takes H W or one side, got [1, 2, 3]' in \
        capsys.readouterr().err
