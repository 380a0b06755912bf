//! `strftime_now(format)` for chat templates (Llama 3.x writes today's date into its
//! system prompt): the C/glibc directives Python passes through, over UTC.

/// A civil date and time in UTC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Civil {
    year: i64,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
    /// 0 = Sunday.
    weekday: u32,
    /// 1-based day of the year.
    yday: u32,
}

fn civil(unix: i64) -> Civil {
    let days = unix.div_euclid(86_400);
    let secs = unix.rem_euclid(86_400);
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    const CUM: [u32; 12] = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let yday = CUM[(month - 1) as usize] + day + u32::from(leap && month > 2);
    Civil {
        year,
        month,
        day,
        hour: (secs / 3600) as u32,
        minute: (secs % 3600 / 60) as u32,
        second: (secs % 60) as u32,
        weekday: (days + 4).rem_euclid(7) as u32,
        yday,
    }
}

const DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];
const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// Formats `unix` (seconds, UTC) with a strftime format. Unknown directives are kept as
/// written, as glibc does.
pub(crate) fn strftime(format: &str, unix: i64) -> String {
    let t = civil(unix);
    let mut out = String::with_capacity(format.len() + 16);
    let mut chars = format.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        // glibc's `%-d`: no padding.
        let unpadded = chars.peek() == Some(&'-');
        if unpadded {
            chars.next();
        }
        let Some(d) = chars.next() else {
            out.push('%');
            break;
        };
        let num = |n: u32, width: usize| {
            if unpadded {
                n.to_string()
            } else {
                format!("{n:0width$}")
            }
        };
        let hour12 = if t.hour.is_multiple_of(12) {
            12
        } else {
            t.hour % 12
        };
        match d {
            'Y' => out.push_str(&t.year.to_string()),
            'y' => out.push_str(&num(t.year.rem_euclid(100) as u32, 2)),
            'm' => out.push_str(&num(t.month, 2)),
            'd' => out.push_str(&num(t.day, 2)),
            'e' => out.push_str(&format!("{:>2}", t.day)),
            'j' => out.push_str(&num(t.yday, 3)),
            'H' => out.push_str(&num(t.hour, 2)),
            'I' => out.push_str(&num(hour12, 2)),
            'M' => out.push_str(&num(t.minute, 2)),
            'S' => out.push_str(&num(t.second, 2)),
            'p' => out.push_str(if t.hour < 12 { "AM" } else { "PM" }),
            'A' => out.push_str(DAYS[t.weekday as usize]),
            'a' => out.push_str(&DAYS[t.weekday as usize][..3]),
            'B' => out.push_str(MONTHS[(t.month - 1) as usize]),
            'b' | 'h' => out.push_str(&MONTHS[(t.month - 1) as usize][..3]),
            'w' => out.push_str(&t.weekday.to_string()),
            'u' => out.push_str(&(if t.weekday == 0 { 7 } else { t.weekday }).to_string()),
            'F' => out.push_str(&format!("{}-{:02}-{:02}", t.year, t.month, t.day)),
            'T' => out.push_str(&format!("{:02}:{:02}:{:02}", t.hour, t.minute, t.second)),
            'Z' => out.push_str("UTC"),
            'z' => out.push_str("+0000"),
            '%' => out.push('%'),
            other => {
                out.push('%');
                if unpadded {
                    out.push('-');
                }
                out.push(other);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama_31_date_format() {
        // 2024-07-26 12:34:56 UTC, a Friday.
        let t = 1_721_997_296;
        assert_eq!(strftime("%d %b %Y", t), "26 Jul 2024");
        assert_eq!(
            strftime("%A %B %-d, %H:%M:%S %p %j", t),
            "Friday July 26, 12:34:56 PM 208"
        );
        assert_eq!(strftime("%Y-%m-%d %% %Q", t), "2024-07-26 % %Q");
    }

    #[test]
    fn leap_days_and_the_epoch() {
        assert_eq!(strftime("%F %a %j", 0), "1970-01-01 Thu 001");
        assert_eq!(strftime("%F %j", 951_782_400), "2000-02-29 060");
        assert_eq!(strftime("%F %j", 1_735_603_200), "2024-12-31 366");
    }
}
