"""Put a dm_control task's physics into the state an EnvPool env of the same task is in.

EnvPool can neither set nor return its physics state, so the equivalence tests go the other
way: they read EnvPool's (float64) observation and set dm_control's qpos, qvel, act and the
task's randomised model values (targets) to what that observation says, then step both with
one action and compare. Where an observation leaves part of the state out, that part is one
the physics does not depend on (a planar walker's x, a free body's x, y and heading on the
flat floor), kept at dm_control's own value, or it is fitted by least squares to the
observations that do depend on it (a free body's height, tilt and root velocities).
`sync` checks that dm_control then observes what EnvPool observed.
"""

from collections.abc import Callable

import mujoco
import numpy as np
from scipy.optimize import least_squares

SYNC_ATOL = 1e-9  # dm_control's observation of the synced state against EnvPool's
# Observations of acceleration-stage sensors (touch, force, accelerometer): after a step both
# simulators report them from the step's last substep, not from the state they end in, so a
# synced state cannot reproduce them (they are not part of the state, and the next step does
# not read them). `sync` leaves them out; the tests compare them after each step.
ACCELERATION_KEYS = {"hopper": ("touch",), "finger": ("touch",),
                     "dog": ("inertial_sensors", "foot_forces", "touch_sensors"),
                     "quadruped": ("imu", "force_torque")}


def _wrap(angle):
    return (angle + np.pi) % (2 * np.pi) - np.pi


def _set(physics, qpos=None, qvel=None, act=None) -> None:
    """Write the state and recompute what depends on it, as a reset does (actuation off): the
    solver's warm start stays that of dm_control's own last step, as EnvPool's does."""
    for name, value in (("qpos", qpos), ("qvel", qvel), ("act", act)):
        if value is not None:
            getattr(physics.data, name)[:] = value
    physics.after_reset()


def _hinges(physics, angles: np.ndarray) -> np.ndarray:
    """qpos with every hinge about the y axis (planar models) set from its body's angle in the
    x-z plane and its parent's (`angles` by body id, the world's 0)."""
    model, qpos = physics.model, physics.data.qpos.copy()
    for joint in np.flatnonzero(model.jnt_type == mujoco.mjtJoint.mjJNT_HINGE):
        body = model.jnt_bodyid[joint]
        relative = angles[body] - angles[model.body_parentid[body]]
        qpos[model.jnt_qposadr[joint]] = _wrap(model.jnt_axis[joint][1] * relative)
    return qpos


def _quat_with_z_row(row: np.ndarray) -> np.ndarray:
    """The rotation (w, x, y, z) of heading 0 whose matrix has `row` as its third row (the
    world's z axis in the body's frame, which dm_control's `zx, zy, zz` observations give)."""
    row = np.asarray(row, np.float64) / np.linalg.norm(row)
    pitch, roll = np.arcsin(np.clip(-row[0], -1, 1)), np.arctan2(row[1], row[2])
    cy, sy, cx, sx = np.cos(pitch), np.sin(pitch), np.cos(roll), np.sin(roll)
    matrix = np.array([[cy, 0, sy], [0, 1, 0], [-sy, 0, cy]]) @ \
        np.array([[1, 0, 0], [0, cx, -sx], [0, sx, cx]])
    quat = np.zeros(4)
    mujoco.mju_mat2Quat(quat, matrix.ravel())
    return quat


def _rotated(quat: np.ndarray, rotvec: np.ndarray) -> np.ndarray:
    """`quat` turned by the world-frame rotation vector `rotvec`."""
    angle = np.linalg.norm(rotvec)
    turn = np.r_[1.0, 0, 0, 0] if angle == 0 else \
        np.r_[np.cos(angle / 2), np.sin(angle / 2) * rotvec / angle]
    out = np.zeros(4)
    mujoco.mju_mulQuat(out, turn, quat)
    return out / np.linalg.norm(out)


def _fit_root(physics, qpos, qvel, act, observe: Callable, target: np.ndarray,
              velocities: bool) -> None:
    """Fit the free root's height and tilt (turns about the world's x and y axes; its heading
    stays `qpos`'s) and, with `velocities`, its 6 velocities, starting from `qpos`, `qvel`, so
    that `observe(physics)` matches `target`."""

    def state(u):
        q, v = qpos.copy(), qvel.copy()
        q[2] += u[0]
        q[3:7] = _rotated(qpos[3:7], np.r_[u[1:3], 0.0])
        if velocities:
            v[:6] += u[3:9]
        return q, v

    def residual(u):
        _set(physics, *state(u), act)
        return observe(physics) - target

    fit = least_squares(residual, np.zeros(9 if velocities else 3), method="lm", xtol=1e-15,
                        ftol=1e-15, gtol=1e-15)
    _set(physics, *state(fit.x), act)


def _free_root_base(physics, fresh: bool) -> tuple[np.ndarray, np.ndarray]:
    """qpos, qvel to fit from: the model's rest pose at an episode's start (its x, y at 0 and
    heading 0, as each task's reset leaves x and y), else dm_control's state after its step,
    which the fit corrects (x, y and heading stay dm_control's own)."""
    if fresh:
        return physics.model.qpos0.copy(), np.zeros(physics.model.nv)
    return physics.data.qpos.copy(), physics.data.qvel.copy()


def sync(env, domain: str, task: str, obs: dict[str, np.ndarray], fresh: bool) -> None:
    """Set `env`'s physics (a dm_control suite Environment) to the state EnvPool's observation
    `obs` (one env's, float64, by EnvPool's key) describes. `fresh`: right after a reset."""
    p = env.physics
    m = p.model
    if domain in ("ball_in_cup", "point_mass"):
        _set(p, obs["position"], obs["velocity"])
    elif domain in ("cheetah", "hopper"):
        _set(p, np.r_[0.0, obs["position"]], obs["velocity"])
    elif domain == "walker":
        pairs = obs["orientations"].reshape(-1, 2)  # (xx, xz) of each body
        qpos = _hinges(p, np.r_[0.0, np.arctan2(pairs[:, 1], pairs[:, 0])])
        qpos[m.jnt_qposadr[0]] = obs["height"] - m.body_pos[1][2]  # rootz
        qpos[m.jnt_qposadr[1]] = 0.0  # rootx
        _set(p, qpos, obs["velocity"])
    elif domain == "acrobot":
        xz, zz = obs["orientations"][:2], obs["orientations"][2:]
        _set(p, _hinges(p, np.r_[0.0, np.arctan2(xz, zz)]), obs["velocity"])
    elif domain == "pendulum":
        zz, xz = obs["orientation"]
        _set(p, _hinges(p, np.r_[0.0, np.arctan2(xz, zz)]), obs["velocity"])
    elif domain == "cartpole":
        pairs = obs["position"][1:].reshape(-1, 2)  # (zz, xz) of each pole
        qpos = _hinges(p, np.r_[0.0, 0.0, np.arctan2(pairs[:, 1], pairs[:, 0])])
        qpos[0] = obs["position"][0]
        _set(p, qpos, obs["velocity"])
    elif domain == "reacher":
        _set(p, obs["position"], obs["velocity"])
        p.named.model.geom_pos["target", ["x", "y"]] = \
            p.named.data.geom_xpos["finger", :2] + obs["to_target"]
        p.forward()
    elif domain == "finger":
        proximal, distal, tip = obs["position"][0], obs["position"][1], obs["position"][2:]
        _set(p, [proximal, distal, 0.0], obs["velocity"])
        tip0 = p.tip_position()  # at hinge angle 0
        turned = np.arctan2(tip[0], tip[1]) - np.arctan2(tip0[0], tip0[1])
        _set(p, [proximal, distal, _wrap(m.jnt_axis[2][1] * turned)], obs["velocity"])
        if task != "spin":
            spinner = p.named.data.sensordata["spinner"][[0, 2]]
            p.named.model.site_pos["target", ["x", "z"]] = spinner + obs["target_position"]
            p.forward()
    elif domain == "humanoid" and task == "run_pure_state":
        _set(p, obs["position"], obs["velocity"])
    elif domain == "humanoid":
        qpos, _ = _free_root_base(p, fresh)
        if fresh:
            qpos[3:7] = _quat_with_z_row(obs["torso_vertical"])
        qpos[7:] = obs["joint_angles"]
        target = np.r_[obs["head_height"], obs["torso_vertical"], obs["com_velocity"],
                       obs["extremities"]]
        _fit_root(p, qpos, obs["velocity"].copy(), None, lambda p: np.r_[
            p.head_height(), p.torso_vertical_orientation(), p.center_of_mass_velocity(),
            p.extremities()], target, False)
    elif domain == "dog":
        qpos, qvel = _free_root_base(p, fresh)
        qpos[7:], qvel[6:] = obs["joint_angles"], obs["joint_velocites"]
        target = np.r_[obs["torso_pelvis_height"], obs["z_projection"],
                       obs["torso_com_velocity"], obs["inertial_sensors"][3:]]
        _fit_root(p, qpos, qvel, obs["actuator_state"], lambda p: np.r_[
            p.torso_pelvis_height(), p.z_projection().ravel(), p.torso_com_velocity(),
            p.inertial_sensors()[3:]], target, True)
    elif domain == "quadruped":
        hinges = int(np.sum(m.jnt_type == mujoco.mjtJoint.mjJNT_HINGE))
        state = obs["egocentric_state"]
        qpos, qvel = _free_root_base(p, fresh)
        if fresh:  # the reset drops the body at x = y = 0: `origin` gives height and tilt
            height = np.linalg.norm(obs["origin"])
            qpos[2], qpos[3:7] = height, _quat_with_z_row(-obs["origin"] / height)
        qpos[7:], qvel[6:] = state[:hinges], state[hinges:2 * hinges]
        gyro = p._get_sensor_names(mujoco.mjtSensor.mjSENS_GYRO)
        imu = p._get_sensor_names(mujoco.mjtSensor.mjSENS_GYRO,
                                  mujoco.mjtSensor.mjSENS_ACCELEROMETER)
        columns = np.concatenate([np.arange(3) + 3 * imu.index(name) for name in gyro])
        target = np.r_[obs["torso_upright"], obs["origin"], obs["torso_velocity"],
                       obs["imu"][columns]]
        _fit_root(p, qpos, qvel, state[2 * hinges:], lambda p: np.r_[
            p.torso_upright(), p.origin(), p.torso_velocity(),
            p.named.data.sensordata[gyro]], target, True)
    else:
        raise KeyError(f"no way to sync {domain}-{task} from its observation")
    seen = env.task.get_observation(p)
    for key, value in seen.items():
        if key in ACCELERATION_KEYS.get(domain, ()):
            continue
        np.testing.assert_allclose(value, obs[key], rtol=0, atol=SYNC_ATOL,
                                   err_msg=f"{domain}-{task}: synced {key}")


def turn_about_z(physics, angle: float) -> None:
    """Turn the whole state (a free root's position, orientation and linear velocity) about
    the world's z axis: on a flat floor the physics is the same, turned."""
    c, s = np.cos(angle), np.sin(angle)
    qpos, qvel = physics.data.qpos.copy(), physics.data.qvel.copy()
    qpos[:2] = c * qpos[0] - s * qpos[1], s * qpos[0] + c * qpos[1]
    qpos[3:7] = _rotated(qpos[3:7], np.r_[0.0, 0.0, angle])
    qvel[:2] = c * qvel[0] - s * qvel[1], s * qvel[0] + c * qvel[1]
    _set(physics, qpos, qvel, physics.data.act.copy() if physics.model.na else None)


def control_step(env, action: np.ndarray) -> tuple[float, dict]:
    """What dm_control's Environment.step does with the physics and the task, without its
    episode bookkeeping (the tests compare episode lengths apart): (reward, observation)."""
    p = env.physics
    env.task.before_step(action, p)
    p.step(int(round(env.control_timestep() / p.model.opt.timestep)))
    env.task.after_step(p)
    return env.task.get_reward(p), env.task.get_observation(p)
