"""Exact and paired statistics for memorisation readings: what a referee asks for beside a point estimate.

Every statistic of the toolkit lives in this package (the experiment's and eval's modules call these; none is
defined twice), one module per kind, each documenting its functions; callers import them from here:

* ``intervals`` -- a rate's Wilson interval, a mean's normal interval, the standard error an interval implies and the
  minimum detectable effect;
* ``bootstrap`` -- percentile bootstraps of a mean over items or clusters (documents) and of paired differences
  (per item, per token, the difference in differences), and the two-sided bootstrap p-value;
* ``auc`` -- a membership attack's ROC-AUC, its stratified bootstrap, its exact p-value, TPR at a low FPR, two arms'
  paired AUC difference;
* ``exact`` -- exact tests of counts: McNemar's, the document-level sign test, the Poisson-binomial count, the exact
  trend test of rare events across ordered groups;
* ``fits`` -- the log-linear fit, the Firth-penalised logistic regression and its cluster bootstrap;
* ``prediction`` -- one set predicting another (precision and recall with Wilson intervals), the threshold rule;
* ``runs`` -- the training run as the unit: the pooled paired AUC difference over seeds, ``replicate_tost``, the t
  interval over runs, a dose-response slope over runs and the two-stage size effect over runs with its
  log-linearity tests.

Every bootstrap interval is a 95 % percentile bootstrap from ``numpy.random.default_rng(seed)`` (same seed, same
interval); ``replicate_tost``'s are Student's t over runs, the others closed forms.
"""

from .auc import EXACT_MAX_ITEMS, auc_of, auc_pvalue, bootstrap_auc, paired_auc_difference, rank_auc, tpr_at_fpr
from .bootstrap import (
    bootstrap_p,
    cluster_bootstrap_mean,
    difference_in_differences,
    document_sums,
    paired_bootstrap,
    paired_difference,
)
from .exact import document_mcnemar, exact_trend, mcnemar_exact, poisson_binomial
from .fits import LOGIT_MAX_ITER, LOGIT_MAX_STEP, clustered_logistic, logistic_batch, loglinear_fit, predict
from .intervals import CI, Z95, mde_range, mean_interval, minimum_detectable_effect, se_from_interval, wilson_interval
from .prediction import set_prediction, threshold_rule
from .runs import (
    loglinearity_lr,
    pooled_paired_auc_difference,
    replicate_tost,
    run_logits,
    size_effect_over_runs,
    size_slope_over_runs,
    slope_over_runs,
    t_over_runs,
)
