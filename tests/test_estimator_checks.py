"""scikit-learn's estimator contract (``check_estimator``), for each kind of assignment."""

from __future__ import annotations

from sklearn.utils.estimator_checks import parametrize_with_checks

from rbfkmeans import RBFKMeans

ESTIMATORS = [
    RBFKMeans(n_clusters=3, assignment=assignment, random_state=0)
    for assignment in ("entmax15", "softmax", "hard")
]


#: scikit-learn 1.9's sparse-container check reads ``classifier_tags.multi_class`` of any
#: estimator with ``predict_proba`` (None for a clusterer: AttributeError) after fitting and
#: predicting; the same formats are fitted, predicted and compared with the dense fit in
#: tests/test_sparse.py
SPARSE_CHECKS = {
    name: ("the check assumes that predict_proba belongs to a classifier; sparse input is "
           "tested in tests/test_sparse.py")
    for name in ("check_estimator_sparse_array", "check_estimator_sparse_matrix")
}


def expected_failed_checks(estimator: RBFKMeans) -> dict[str, str]:
    if estimator.assignment == "hard":
        # Same reason as scikit-learn's own KMeans, which lists this check as expected to fail.
        return {
            **{f"check_sample_weight_equivalence_on_{kind}_data": (
                "k-means++ seeding picks points by their position in X and the check shuffles "
                "the weighted rows, so the two fits start from different seeds and reach "
                "different Lloyd fixed points; from the same start (and row order) weighted "
                "== repeated holds exactly (test_integer_weights_equal_repeated_rows)"
            ) for kind in ("dense", "sparse")},
            **SPARSE_CHECKS,
        }
    return dict(SPARSE_CHECKS)




@parametrize_with_checks(ESTIMATORS, expected_failed_checks=expected_failed_checks)
def test_sklearn_compatible(estimator, check) -> None:
    check(estimator)
