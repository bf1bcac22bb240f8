"""Audit 8 (kf): the Kubeflow + SageMaker hybrid reference walked as its docs' reader would."""

from __future__ import annotations

import pytest

from dtrain.errors import SpecError
from dtrain.spec_sagemaker import SageMakerOptions


@pytest.mark.parametrize("uri", ["s3://b/ck", "s3://My_Bucket/ck", "s3://-bucket/ck"])
def test_a_checkpoint_uri_with_a_bad_bucket_names_the_bucket_rule(uri):
    """A checkpoint URI of the right shape whose bucket S3 would refuse says what is wrong with the bucket,
    as a channel's URI does, instead of asking for the shape it already has."""
    with pytest.raises(SpecError) as e:
        SageMakerOptions(checkpoint_uri=uri)
    assert "bucket name must be 3-63 lower-case letters" in str(e.value)
    assert str(e.value).startswith("invalid checkpoint_uri")  # the SDK's field (the CLI's --checkpoint-s3-uri)


@pytest.mark.parametrize("uri", ["gs://bucket/ck", "s3://", "bucket/ck", "s3://bucket/a b"])
def test_a_checkpoint_uri_of_another_shape_asks_for_s3_bucket_prefix(uri):
    with pytest.raises(SpecError, match=r"use s3://BUCKET/PREFIX"):
        SageMakerOptions(checkpoint_uri=uri)


@pytest.mark.parametrize("uri", ["s3://bbb", "s3://my-bucket/ck/run-1", "s3://my.bucket/"])
def test_good_checkpoint_uris_pass(uri):
    assert SageMakerOptions(checkpoint_uri=uri).checkpoint_uri == uri
